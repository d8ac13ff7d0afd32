"""One simulated run, a function of its seed: the plan (how many instances, conversations and
clients; which faults, when), the run itself on virtual time, then the checker.

The phases: faults and clients until `faults_end`; a quiet spell in which nothing fails
(leases expire, turns are taken over, writes catch up); a probe of every conversation (it
must answer a new message); a last quiet spell; then `checker.check`.
"""

from __future__ import annotations

import json
import logging
import random
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from chat_agent import clock, ids
from chat_agent.context.tokens import TokenCounter
from chat_agent.store import SqliteStore
from tests.sim import checker
from tests.sim.model import RECORDED
from tests.sim.bugs import Bugs
from tests.sim.bus import BusFault, Network
from tests.sim.clients import Client, Conn, Probe, Received, Slot
from tests.sim.node import LEASE_SECONDS, Node, SimSocket
from tests.sim.store import Shadow, StoreFault
from tests.sim.world import EPOCH, World, at_once

QUIET = 35.0  # seconds without faults before the probes (leases expire, takeovers, the backlog stored)
PROBE_WITHIN = 60.0  # seconds a conversation has to answer the probe
SETTLE = 5.0  # seconds after the probes before the final look
HORIZON = 1000.0  # the clock never goes past this: a run that gets there is stuck

_counter: TokenCounter | None = None


def token_counter() -> TokenCounter:
    global _counter
    if _counter is None:
        _counter = TokenCounter()  # loading the encoding takes a while: once per process
    return _counter


@dataclass
class Plan:
    nodes: int
    slots: list[int]  # clients per conversation
    faults_end: float
    store_faults: list[StoreFault] = field(default_factory=list)
    bus_faults: list[BusFault] = field(default_factory=list)
    kills: list[float] = field(default_factory=list)
    restarts: list[float] = field(default_factory=list)
    stalls: list[tuple[float, float]] = field(default_factory=list)
    steals: list[float] = field(default_factory=list)
    model_faults: bool = False

    @classmethod
    def draw(cls, seed: int) -> Plan:
        """Swarm testing: each seed turns a random subset of the fault kinds on."""
        rng = random.Random(f"plan:{seed}")
        plan = cls(nodes=rng.choice([1, 2, 2, 3, 3]), slots=[rng.choice([1, 1, 2]) for _ in range(rng.choice([1, 2, 2, 3]))],
                   faults_end=rng.uniform(20.0, 60.0))
        on = {kind for kind in ("store", "bus", "kill", "stall", "steal", "model") if rng.random() < 0.45}
        end = plan.faults_end
        if "store" in on:
            t = rng.uniform(1.0, end / 2)
            for _ in range(rng.randint(1, 3)):
                if t >= end - 1:
                    break
                kind = rng.choice(["refuse", "hang", "diskfull", "slow", "indoubt", "cut"])
                duration = rng.choice([rng.uniform(0.5, 4.0), rng.uniform(4.0, 30.0)])
                plan.store_faults.append(StoreFault(kind, t, min(t + duration, end)))
                t += duration
                if kind == "cut":  # the first write after it meets a connection the cut broke
                    plan.store_faults.append(StoreFault("stale", t, t + rng.uniform(0.5, 2.0)))
                t += rng.uniform(2.0, 20.0)
        if "bus" in on and plan.nodes > 1:
            t = rng.uniform(1.0, end / 2)
            for _ in range(rng.randint(1, 3)):
                if t >= end - 1:
                    break
                kind = rng.choice(["partition", "delay"])
                duration = rng.uniform(1.0, 20.0)
                plan.bus_faults.append(BusFault(kind, t, min(t + duration, end), f"n{rng.randrange(plan.nodes)}"))
                t += duration + rng.uniform(2.0, 15.0)
        if "kill" in on and plan.nodes > 1:
            for _ in range(rng.randint(1, plan.nodes - 1)):
                plan.kills.append(rng.uniform(2.0, end))
                if rng.random() < 0.5:
                    plan.restarts.append(rng.uniform(2.0, end + 10.0))
        if "stall" in on:
            for _ in range(rng.randint(1, 2)):
                plan.stalls.append((rng.uniform(2.0, end), rng.choice([rng.uniform(0.5, 5.0), rng.uniform(5.0, 30.0)])))
        if "steal" in on:
            plan.steals = sorted(rng.uniform(2.0, end) for _ in range(rng.randint(1, 3)))
        plan.model_faults = "model" in on
        return plan

    def describe(self) -> str:
        parts = [f"{self.nodes} instance(s), clients per conversation {self.slots}, faults until t={self.faults_end:.0f}"]
        parts += [f"store {f.kind} {f.start:.1f}-{f.end:.1f}" for f in self.store_faults]
        parts += [f"bus {f.kind} {f.instance if f.kind == 'partition' else ''} {f.start:.1f}-{f.end:.1f}"
                  for f in self.bus_faults]
        parts += [f"kill at {t:.1f}" for t in self.kills] + [f"new instance at {t:.1f}" for t in self.restarts]
        parts += [f"stall at {t:.1f} for {d:.1f}" for t, d in self.stalls] + [f"steal at {t:.1f}" for t in self.steals]
        if self.model_faults:
            parts.append("model faults")
        return "; ".join(parts)


@dataclass
class Outcome:
    seed: int
    violations: list[str]
    stats: dict[str, Any]
    trace: list[str] | None = None


class Simulation:
    def __init__(self, seed: int, bug: str | None = None, verbose: bool = False, plan: Plan | None = None):
        self.seed = seed
        RECORDED.clear()
        self.plan = plan or Plan.draw(seed)
        self.world = World(seed)
        self.shadow = Shadow()
        self.db = SqliteStore(":memory:", inline=True)
        self.network = Network(self, random.Random(f"network:{seed}"))
        self.counter = token_counter()
        self.bugs = Bugs(bug)
        self.nodes: list[Node] = []
        self.slots: list[Slot] = []
        self.clients: list[Client] = []
        self.probes: list[Probe] = []
        self.connections: list[Conn] = []
        self.steals: list[tuple[float, str]] = []  # (t, conversation)
        self.disrupted: dict[str, float] = {}  # instance -> when it was killed, or stalled long
        self.tearing_down = False
        self.verbose = verbose
        self.lines: list[str] = []
        self._tool_ids = 0
        self.errors: list[str] = []  # what the product logged as errors (not failures by themselves)
        self.endpoint_errors: list[str] = []  # sockets the endpoint failed on (closed 1011)
        self.clients_loop = self.world.loop("clients")

    # ---- what the parts ask -------------------------------------------------------------------

    def trace(self, line: str, *, detail: bool = False) -> None:
        if self.verbose:
            self.lines.append(f"{self.world.now:9.3f}  {line}")

    def next_tool_id(self) -> str:
        self._tool_ids += 1
        return f"{self._tool_ids:06d}"

    def store_fault(self) -> StoreFault | None:
        now = self.world.now
        return next((f for f in self.plan.store_faults if f.start <= now < f.end), None)

    def bus_fault(self) -> BusFault | None:
        now = self.world.now
        return next((f for f in self.plan.bus_faults if f.start <= now < f.end), None)

    def model_faults(self) -> bool:
        return self.plan.model_faults and self.world.now < self.plan.faults_end

    def reachable_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.ready and not n.dead]

    def sent(self, socket: SimSocket, text: str) -> None:
        """An instance sends a frame on a socket: noted with what the store held at that moment,
        and handed to the client on its loop."""
        data = json.loads(text)
        seq = data.get("seq") if data.get("type") != "session" else None
        stored = seq is not None and self.shadow.stored(data.get("conversationId", ""), seq, text)
        writer = socket.node.writer
        back = socket.node.available_at
        away = writer is not None and (writer.unavailable or (back is not None and self.world.now - back < 0.01))
        item = Received(self.world.now, seq, data.get("type", "?"), data, text, stored, away)
        if self.verbose:
            what = data.get("content") or data.get("stopReason") or data.get("state") or data.get("message") or ""
            self.trace(f"-> conn {socket.conn.id} ({socket.node.name}) {item.type} seq={data.get('seq')} {str(what)[:40]}"
                       + ("" if stored or seq is None else " [not stored yet]"))
        self.clients_loop.call_soon(socket.conn.arrived, item)

    def closed_by_server(self, socket: SimSocket, code: int) -> None:
        self.trace(f"-> conn {socket.conn.id} ({socket.node.name}) closed {code}")
        self.clients_loop.call_soon(socket.conn.gone, code)

    # ---- faults -----------------------------------------------------------------------------

    def _schedule(self) -> None:
        world, plan = self.world, self.plan
        for fault in plan.store_faults:
            world.at(fault.start, lambda f=fault: self.trace(f"STORE {f.kind} until {f.end:.1f}"))
        for fault in plan.bus_faults:
            world.at(fault.start, lambda f=fault: self.trace(f"BUS {f.kind} {f.instance} until {f.end:.1f}"))
            if fault.kind == "partition":
                world.at(fault.end, lambda f=fault: self.network.reconnected(f.instance))
        for t in plan.kills:
            world.at(t, self._kill)
        for t in plan.restarts:
            world.at(t, self._add_node)
        for t, duration in plan.stalls:
            world.at(t, lambda d=duration: self._stall(d))
        for t in plan.steals:
            world.at(t, self._steal)

    def _calm(self) -> bool:
        """Whether the store is healthy and no instance shows frames it could not store yet: a
        kill, stall or stolen lease then loses nothing a client was shown."""
        return self.store_fault() is None and not any(n.writer is not None and n.writer.unavailable
                                                      for n in self.reachable_nodes())

    def _later(self, action: Any) -> bool:
        if self._calm():
            return False
        if self.world.now + 2.0 < self.plan.faults_end:
            self.world.at(self.world.now + 2.0, action)
        return True

    def _kill(self) -> None:
        alive = self.reachable_nodes()
        if len(alive) < 2 or self._later(self._kill):
            return
        node = self.world.rng.choice(alive)
        self.trace(f"KILL {node.name}")
        node.killed()
        self.world.kill(node.loop)
        self.network.leave(node.name)
        self.disrupted[node.name] = self.world.now

    def _stall(self, duration: float) -> None:
        alive = self.reachable_nodes()
        if not alive or self._later(lambda: self._stall(duration)):
            return
        node = self.world.rng.choice(alive)
        self.trace(f"STALL {node.name} for {duration:.1f}")
        self.world.stall(node.loop, duration)
        if duration >= LEASE_SECONDS / 2:
            self.disrupted.setdefault(node.name, self.world.now)

    def _steal(self) -> None:
        ids_ = [slot.id for slot in self.slots if slot.id is not None]
        if not ids_ or self._later(self._steal):
            return
        conversation_id = self.world.rng.choice(ids_)
        db = self.db._writes
        assert db is not None
        rows = db.execute("UPDATE leases SET instance = 'thief', epoch = epoch + 1, expires_at = ?"
                          " WHERE conversation_id = ? AND instance <> '' RETURNING epoch",
                          (clock.now() + LEASE_SECONDS, conversation_id)).fetchall()
        if rows:
            self.trace(f"STEAL the lease of {conversation_id} (epoch {rows[0][0]})")
            self.steals.append((self.world.now, conversation_id))

    def _add_node(self) -> None:
        name = f"n{len(self.nodes)}"
        self.trace(f"START {name}")
        node = Node(self, name)
        self.nodes.append(node)
        node.start()

    # ---- the run ------------------------------------------------------------------------------

    def run(self) -> Outcome:
        plan, world = self.plan, self.world
        rng_ids = random.Random(f"ids:{self.seed}")
        tokens = [(ids.hex_source, ids.hex_source.set(lambda n: rng_ids.randbytes(n).hex())),
                  (clock.wall, clock.wall.set(lambda: EPOCH + world.now))]
        handler = _Collect(self)
        logger = logging.getLogger("chat_agent")
        level, propagate = logger.level, logger.propagate
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING if self.verbose else logging.ERROR)
        logger.propagate = False
        violations: list[str] = []
        try:
            with world:
                at_once(self.db.open())
                try:
                    violations = self._run()
                except Exception as exc:  # the run itself broke (a livelock, a bug of the harness)
                    violations = [f"the run stopped at t={world.now:.3f}: {exc!r}"]
                    self.trace(f"STOPPED: {exc!r}")
                    self.tearing_down = True
                    world.tear_down()
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate
            for var, token in reversed(tokens):
                var.reset(token)  # type: ignore[attr-defined]
            at_once(self.db.close())
        stats = {"steps": world.steps, "virtual_seconds": round(world.now, 1),
                 "frames": sum(len(c.frames) for c in self.connections), "connections": len(self.connections),
                 "turns": len(self.shadow.turns), "errors_logged": len(self.errors),
                 "endpoint_errors": len(self.endpoint_errors), "lossy": getattr(self, "stats_lossy", 0)}
        return Outcome(self.seed, violations, stats, self.lines if self.verbose else None)

    def _run(self) -> list[str]:
        plan, world = self.plan, self.world
        self.trace(f"PLAN {plan.describe()}")
        for _ in range(plan.nodes):
            self._add_node()
        self._schedule()
        for index, count in enumerate(plan.slots):
            slot = Slot(index)
            self.slots.append(slot)
            for k in range(count):
                client = Client(self, f"c{index}.{k}", slot, creator=k == 0)
                slot.clients.append(client)
                self.clients.append(client)
        world.run(until=1.0, done=lambda: all(n.ready for n in self.nodes))
        for client in self.clients:
            self.clients_loop.create_task(client.run(plan.faults_end), name=client.name)
        world.run(until=plan.faults_end + QUIET)
        self.trace("PROBES")
        for slot in self.slots:
            if slot.id is not None:
                probe = Probe(self, slot)
                self.probes.append(probe)
                self.clients_loop.create_task(probe.run(PROBE_WITHIN), name=probe.client.name)
        probes_end = world.now + PROBE_WITHIN + 5.0
        world.run(until=probes_end, done=lambda: all(p.answered for p in self.probes))
        world.run(until=world.now + SETTLE)
        violations = checker.check(self)
        self.tearing_down = True
        world.tear_down()
        return violations


class _Collect(logging.Handler):
    """What the product logs, with the virtual time: errors are kept, the rest traced."""

    def __init__(self, sim: Simulation):
        super().__init__()
        self.sim = sim

    def emit(self, record: logging.LogRecord) -> None:
        line = f"log {record.levelname} {record.name}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            line += f" [{record.exc_info[1]!r}]"
        if record.levelno >= logging.ERROR:
            self.sim.errors.append(f"t={self.sim.world.now:.3f} {line}")
        self.sim.trace(line)
