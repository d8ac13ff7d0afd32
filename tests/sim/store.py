"""The store as the simulation gives it to each instance: the real SqliteStore (one in-memory
database that every instance shares, run inline on the caller's loop) behind a connection
that the schedule can make slow, refuse, hang, fail on writes (a full disk) or lose the
answer of a commit that went in (in doubt).

Everything the database committed is also written down in a `Shadow`, the checker's
record of what was ever stored (the event log itself is pruned as turns go by).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chat_agent.store import (AppendEvents, CreateConversation, DeleteConversation, FinishTurn, SqliteStore, StartTurn,
                              Store)
from chat_agent.store.base import FencedOut, StoreUnavailable

if TYPE_CHECKING:
    from tests.sim.run import Simulation

# Statements that write (a full disk refuses them; reads still work).
WRITES = frozenset({"apply", "claim_lease", "renew_leases", "release_lease", "swap_memories"})


@dataclass(slots=True)
class StoredEvent:
    seq: int
    type: str
    turn_id: str | None
    frame: str
    at: float


@dataclass
class Shadow:
    """What the database ever committed, by conversation."""

    events: dict[str, dict[int, StoredEvent]] = field(default_factory=dict)
    turns: dict[str, tuple[str, str, float]] = field(default_factory=dict)  # turn id -> (conversation, message id, at)
    finished: dict[str, list[float]] = field(default_factory=dict)  # turn id -> when FinishTurn went in
    created: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    fenced: list[tuple[float, str, str]] = field(default_factory=list)  # (t, instance, conversation)
    in_doubt: set[str] = field(default_factory=set)  # conversations a commit went in for, its answer lost

    def exists(self, conversation_id: str) -> bool:
        return conversation_id in self.created and conversation_id not in self.deleted

    def committed(self, ops: Sequence[Any], now: float) -> None:
        for op in ops:
            if isinstance(op, CreateConversation):
                self.created.add(op.conversation_id)
            elif isinstance(op, AppendEvents):
                if not self.exists(op.conversation_id):
                    continue  # the store does nothing for a conversation that is not there
                log = self.events.setdefault(op.conversation_id, {})
                for event in op.events:
                    log[event.seq] = StoredEvent(event.seq, event.type, event.turn_id, event.frame, now)
            elif isinstance(op, StartTurn):
                if self.exists(op.turn.conversation_id):
                    self.turns[op.turn.id] = (op.turn.conversation_id, op.turn.message_id, now)
            elif isinstance(op, FinishTurn):
                if op.turn_id in self.turns:
                    self.finished.setdefault(op.turn_id, []).append(now)
            elif isinstance(op, DeleteConversation):
                self.deleted.add(op.conversation_id)

    def stored(self, conversation_id: str, seq: int, text: str) -> bool:
        event = self.events.get(conversation_id, {}).get(seq)
        return event is not None and event.frame == text


@dataclass
class StoreFault:
    kind: str  # refuse | hang | diskfull | slow | indoubt | cut | stale
    start: float
    end: float
    met: set[str] = field(default_factory=set)  # cut, stale: the instances whose commit it met (`_enter`)


class SimStore(Store):
    """One instance's connection to the shared database."""

    kind = "sim"

    def __init__(self, sim: Simulation, instance: str, db: SqliteStore, rng: random.Random):
        self._sim = sim
        self._instance = instance
        self._db = db
        self._rng = rng
        # Half the instances (by seed) commit urgent writes in the submitting step where they
        # can, as on SQLite (`apply_now`); the others only through the writer's rounds.
        self._now = random.Random(f"now:{instance}:{sim.seed}").random() < 0.5

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def _enter(self, name: str) -> None:
        """The request's way to the database, and the faults it meets there."""
        sim = self._sim
        await asyncio.sleep(self._rng.uniform(0.0003, 0.003))
        fault = None if sim.tearing_down else sim.store_fault()
        if fault is None:
            return
        match fault.kind:
            case "refuse":
                raise StoreUnavailable(f"connection refused (simulated, until t={fault.end:.1f})")
            case "stale" if name == "apply" and self._instance not in fault.met:
                fault.met.add(self._instance)  # an instance's first write after a cut meets a connection it broke
                raise StoreUnavailable("a connection broken by the cut (simulated)")
            case "cut" if name == "apply" and self._instance not in fault.met:
                fault.met.add(self._instance)  # under way as the path broke: it goes in, its answer is lost
            case "hang" | "cut":
                await asyncio.sleep(max(0.0, fault.end - sim.world.now))
                raise StoreUnavailable("connection reset after a hang (simulated)")
            case "diskfull" if name in WRITES:  # as SqliteStore says it (SQLITE_FULL)
                raise StoreUnavailable("database or disk is full (simulated)")
            case "slow":
                await asyncio.sleep(self._rng.uniform(0.2, 3.0))

    async def _leave(self, name: str, ops: Sequence[Any] = ()) -> None:
        """The answer's way back: lost, in doubt, for a commit that went in."""
        fault = None if self._sim.tearing_down else self._sim.store_fault()
        if fault is not None and fault.kind == "cut":
            # The connections drop: a commit that went in is not acknowledged, and nothing
            # gets through until the cut ends (a database behind a broken network path).
            if name in WRITES:
                self._sim.shadow.in_doubt.update(op.conversation_id for op in ops if isinstance(op, AppendEvents))
            await asyncio.sleep(max(0.0, fault.end - self._sim.world.now))
            raise StoreUnavailable("the connection was cut (simulated)")
        if fault is not None and fault.kind == "indoubt" and name in WRITES and self._rng.random() < 0.4:
            self._sim.shadow.in_doubt.update(op.conversation_id for op in ops if isinstance(op, AppendEvents))
            await asyncio.sleep(self._rng.uniform(0.5, 20.0))
            raise StoreUnavailable("the connection was lost before the commit was acknowledged (simulated)")

    async def apply(self, ops: Sequence[Any], fences: Any = None, *, busy: bool = False) -> None:
        await self._enter("apply")
        sim = self._sim
        try:
            await self._db.apply(ops, fences, busy=busy)
        except FencedOut as exc:
            for cid in exc.conversation_ids:
                sim.shadow.fenced.append((sim.world.now, self._instance, cid))
            raise
        sim.shadow.committed(ops, sim.world.now)
        sim.trace(f"{self._instance} committed {_describe(ops)}", detail=True)
        await self._leave("apply", ops)

    def apply_now(self, ops: Sequence[Any], fences: Any = None) -> bool:
        """A local database's commit in the caller's step (what SQLite does with its write
        lock free): not tried while a fault is under way, but a full disk, which refuses it
        as SQLite does."""
        sim = self._sim
        if not self._now:
            return False
        fault = None if sim.tearing_down else sim.store_fault()
        if fault is not None and fault.kind == "diskfull":
            raise StoreUnavailable("database or disk is full (simulated)")
        if fault is not None:
            return False
        try:
            done = self._db.apply_now(ops, fences)
        except FencedOut as exc:
            for cid in exc.conversation_ids:
                sim.shadow.fenced.append((sim.world.now, self._instance, cid))
            raise
        if done:
            sim.shadow.committed(ops, sim.world.now)
            sim.trace(f"{self._instance} committed at once {_describe(ops)}", detail=True)
        return done


def _describe(ops: Sequence[Any]) -> str:
    parts = []
    for op in ops:
        if isinstance(op, AppendEvents):
            parts.append(f"{op.conversation_id[:6]}:" + ",".join(f"{e.seq}{e.type[:4]}" for e in op.events))
        elif isinstance(op, StartTurn):
            parts.append(f"StartTurn({op.turn.id[-6:]})")
        elif isinstance(op, FinishTurn):
            parts.append(f"FinishTurn({op.turn_id[-6:]})")
        else:
            parts.append(type(op).__name__)
    return " ".join(parts)


def _forward(name: str) -> Any:
    async def call(self: SimStore, *args: Any, **kwargs: Any) -> Any:
        await self._enter(name)
        result = await getattr(self._db, name)(*args, **kwargs)
        await self._leave(name)
        return result

    call.__name__ = name
    return call


for _name in sorted(Store.__abstractmethods__ - {"open", "close", "apply"}):
    setattr(SimStore, _name, _forward(_name))
SimStore.__abstractmethods__ = frozenset()
