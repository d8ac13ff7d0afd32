"""Commits in doubt: a commit that went in but whose answer was lost (a cut connection) is
found by the writer and never written twice, however the tries after it fail.

The store is a real SQLite file behind the connection faults a network gives (what
tests/chaos does to PostgreSQL with a TCP proxy, here on a script so that one exact order
of events is tested every time): each call takes the next fault of its kind.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any, Sequence

from chat_agent.store import AppendEvents, CreateConversation, EventRecord, StoreUnavailable, StoreWriter
from chat_agent.store.sqlite import SqliteStore

OWNER = "u"


class Flaky(SqliteStore):
    """Writes and reads as the file does, but the next scripted fault of each call goes first:
    "refused" (nothing done), "lost" (a write done, its answer lost)."""

    def __init__(self, path: Path):
        super().__init__(path)
        self.writes: deque[str] = deque()
        self.reads: deque[str] = deque()

    async def apply(self, ops: Sequence[Any], fences: Any = None, *, busy: bool = False) -> None:
        fault = self.writes.popleft() if self.writes else None
        if fault == "refused":
            raise StoreUnavailable("connection refused")
        await super().apply(ops, fences, busy=busy)
        if fault == "lost":
            raise StoreUnavailable("server closed the connection unexpectedly")

    async def events_after(self, *args: Any, **kwargs: Any) -> list[EventRecord]:
        if self.reads and self.reads.popleft() == "refused":
            raise StoreUnavailable("connection refused")
        return await super().events_after(*args, **kwargs)


def events(cid: str, *seqs: int) -> AppendEvents:
    return AppendEvents(OWNER, cid, tuple(EventRecord(cid, s, "pong", None, "{}") for s in seqs))


async def test_a_commit_found_stored_is_not_written_again_when_the_next_try_fails(tmp_path: Path):
    store = Flaky(tmp_path / "chat.db")
    await store.open()
    writer = StoreWriter(store, retry_delay=0.01)
    writer.start()
    try:
        await writer.commit([CreateConversation(OWNER, "a", 1.0), CreateConversation(OWNER, "b", 1.0)])
        told: list[str] = []
        # The commit of a1 and b1 goes in, its answer is lost; looking for it is refused twice
        # (once per scope tried on its own); then it is found, but the write of what queued
        # meanwhile (a2) meets a broken connection, and each scope is tried on its own again.
        store.writes.extend(["lost", "refused"])
        store.reads.extend(["refused", "refused"])
        writer.submit([events("a", 1)], lambda: told.append("a1"))
        writer.submit([events("b", 1)], lambda: told.append("b1"))
        assert await writer.availability.get() is False
        writer.submit([events("a", 2)], lambda: told.append("a2"))
        await writer.flush()
        assert await writer.availability.get() is True
        assert writer.losses.empty(), "a commit found stored was written again and lost its conversation"
        assert told == ["a1", "b1", "a2"]
        assert [e.seq for e in await store.events_after(OWNER, "a", 0)] == [1, 2]
        assert [e.seq for e in await store.events_after(OWNER, "b", 0)] == [1]
    finally:
        await writer.close()
        await store.close()
