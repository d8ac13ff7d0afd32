"""The bus between simulated instances: the real `Bus` (its queue, its flusher, its typed
messages) over a network that the schedule can slow down or cut.

Delivery keeps the order of one sender's messages to one receiver (as one PostgreSQL or
Redis connection does). A partition cuts one instance off the bus for a while: what it
sends fails (its flusher keeps the frames and tries again), what is sent to it is lost,
and when it is back its listener says so (`Resync`), as the real buses do after they
reconnect.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chat_agent.sessions.bus import Bus

if TYPE_CHECKING:
    from tests.sim.run import Simulation
    from tests.sim.world import SimLoop


@dataclass
class BusFault:
    kind: str  # partition (one instance cut off) | delay (every message late)
    start: float
    end: float
    instance: str | None = None


class Network:
    def __init__(self, sim: Simulation, rng: random.Random):
        self._sim = sim
        self._rng = rng
        self._buses: dict[str, tuple[SimBus, SimLoop]] = {}
        self._last: dict[tuple[str, str], float] = {}  # (sender, receiver) -> when its last message arrives

    def join(self, bus: SimBus, loop: SimLoop) -> None:
        self._buses[bus.instance] = (bus, loop)

    def leave(self, instance: str) -> None:
        self._buses.pop(instance, None)

    def cut_off(self, instance: str) -> bool:
        fault = self._sim.bus_fault()
        return fault is not None and fault.kind == "partition" and fault.instance == instance

    def send(self, sender: str, channel: str, payload: str) -> None:
        sim = self._sim
        if self.cut_off(sender):
            raise ConnectionError("the bus is unreachable (simulated partition)")
        fault = sim.bus_fault()
        slow = fault is not None and fault.kind == "delay"
        for instance, (bus, loop) in list(self._buses.items()):
            if instance == sender or (channel != bus.frames_channel and channel != bus.instance_channel(instance)):
                continue
            latency = self._rng.uniform(0.3, 3.0) if slow else self._rng.uniform(0.0005, 0.005)
            key = (sender, instance)
            when = max(sim.world.now + latency, self._last.get(key, 0.0))
            self._last[key] = when
            loop.call_at(when, self._arrive, instance, bus, channel, payload)

    def _arrive(self, instance: str, bus: SimBus, channel: str, payload: str) -> None:
        if self._buses.get(instance, (None,))[0] is not bus or self.cut_off(instance):
            return  # it left, or it is cut off: lost
        bus.arrived(channel, payload)

    def reconnected(self, instance: str) -> None:
        """A partition ended: the instance's listener is back, and says it may have missed some."""
        entry = self._buses.get(instance)
        if entry is not None:
            bus, loop = entry
            loop.call_soon(bus.resynced)


class SimBus(Bus):
    kind = "sim"

    def __init__(self, instance: str, network: Network, loop: SimLoop):
        super().__init__(instance, namespace="sim")
        self._network = network
        self._loop = loop

    async def _listen(self) -> None:
        self._network.join(self, self._loop)

    async def _stop(self) -> None:
        self._network.leave(self.instance)

    async def _send(self, messages: list[tuple[str, str]], direct: bool = False) -> None:
        for channel, payload in messages:
            self._network.send(self.instance, channel, payload)

    def arrived(self, channel: str, payload: str) -> None:
        self._received(channel, payload)

    def resynced(self) -> None:
        self._resynced()
