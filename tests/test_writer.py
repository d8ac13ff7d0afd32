"""The group-commit writer against a real SQLite file made to fail for one conversation.

The failure is the store's own: a trigger, installed through a second connection the way an
operator (or a corrupt row) would change the file, refuses that conversation's events.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from chat_agent.store import (AppendEvents, CreateConversation, EventRecord, MemoriesRecord, NotStored, SetMemories,
                              SqliteStore, StoreWriter)

OWNER = "u"


def events(cid: str, *seqs: int) -> AppendEvents:
    return AppendEvents(OWNER, cid, tuple(EventRecord(cid, s, "pong", None, "{}") for s in seqs))


def refuse(path: Path, cid: str, *, how: str = "SELECT RAISE(ABORT, 'refused')") -> None:
    """Makes every event insert of `cid` fail: with RAISE a broken constraint, with a statement
    that fails at run time (malformed JSON) an operational error (what a full or failing disk looks like)."""
    with sqlite3.connect(path) as db:
        db.execute(f"CREATE TRIGGER refuse_{cid} BEFORE INSERT ON events WHEN NEW.conversation_id = '{cid}'"
                   f" BEGIN {how}; END")


def allow(path: Path, cid: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute(f"DROP TRIGGER refuse_{cid}")


@pytest.fixture
async def setup(tmp_path: Path):
    path = tmp_path / "db.sqlite"
    store = SqliteStore(path)
    await store.open()
    writer = StoreWriter(store, retry_delay=0.05)
    lost: list[str] = []
    writer.on_lost = lost.append
    writer.start()
    await writer.commit([CreateConversation(OWNER, "ok", 1.0), CreateConversation(OWNER, "doomed", 1.0)])
    yield store, writer, path, lost
    await writer.close()
    await store.close()


async def seqs(store: SqliteStore, cid: str) -> list[int]:
    return [e.seq for e in await store.events_after(OWNER, cid, 0)]


@pytest.mark.parametrize("how", ["SELECT RAISE(ABORT, 'refused')", "SELECT json('{')"])
async def test_a_failing_conversation_loses_only_its_own_writes(setup, how):
    store, writer, path, lost = setup
    refuse(path, "doomed", how=how)
    told: list[str] = []
    memories = MemoriesRecord(["short"], ["likes tea"], 2.0)
    writer.submit([events("ok", 1)], lambda: told.append("ok 1"))
    writer.submit([events("doomed", 1)], lambda: told.append("doomed 1"))
    writer.submit([SetMemories(OWNER, memories)], lambda: told.append("memories"))
    writer.submit([events("ok", 2)], lambda: told.append("ok 2"))
    await writer.flush()
    assert told == ["ok 1", "memories", "ok 2"]  # in order, and never what was not stored
    assert lost == ["doomed"]
    assert await seqs(store, "ok") == [1, 2] and await seqs(store, "doomed") == []
    assert await store.get_memories(OWNER) == memories


async def test_a_lost_conversation_is_refused_until_reopened(setup):
    store, writer, path, lost = setup
    refuse(path, "doomed")
    writer.submit([events("doomed", 1)])
    await writer.flush()
    allow(path, "doomed")  # the disk is fine again, but what is in memory still builds on seq 1
    told: list[str] = []
    writer.submit([events("doomed", 2)], lambda: told.append("doomed 2"))
    with pytest.raises(NotStored):
        await writer.commit([events("doomed", 3)])
    await writer.flush()
    assert writer.lost("doomed") and told == [] and await seqs(store, "doomed") == []
    writer.reopen("doomed")  # its owner reloaded it from the store
    await writer.commit([events("doomed", 1)])
    assert await seqs(store, "doomed") == [1] and lost == ["doomed"]


async def test_writes_queued_behind_a_lost_one_are_lost_with_it(setup):
    store, writer, path, lost = setup
    refuse(path, "doomed", how="SELECT json('{')")
    writer.submit([events("doomed", 1)])
    await asyncio.sleep(0.02)  # the writer is between its retries of "doomed" now
    told: list[str] = []
    writer.submit([events("doomed", 2)], lambda: told.append("doomed 2"))
    writer.submit([events("ok", 1)], lambda: told.append("ok 1"))
    await writer.flush()
    allow(path, "doomed")
    assert told == ["ok 1"] and lost == ["doomed"]
    assert await seqs(store, "doomed") == [] and await seqs(store, "ok") == [1]


async def test_one_submission_over_two_conversations_is_told_only_if_both_are_stored(setup):
    store, writer, path, lost = setup
    refuse(path, "doomed")
    told: list[str] = []
    writer.submit([events("ok", 1), events("doomed", 1)], lambda: told.append("both"))
    await writer.flush()
    assert told == [] and await seqs(store, "ok") == [1] and lost == ["doomed"]


async def test_a_big_write_does_not_hold_up_other_conversations(setup):
    """One conversation writes 2 MB in the batch; the other's frames are committed and
    handed over first, in a transaction of their own, and both end up stored in order."""
    store, writer, path, lost = setup
    told: list[str] = []
    big = AppendEvents(OWNER, "doomed", tuple(EventRecord("doomed", s, "pong", None, "x" * 200_000)
                                              for s in range(1, 11)))
    writer.submit([big], lambda: told.append("big"))
    writer.submit([events("ok", 1)], lambda: told.append("small 1"))
    writer.submit([events("doomed", 11)], lambda: told.append("big's next"))
    writer.submit([events("ok", 2)], lambda: told.append("small 2"))
    await writer.flush()
    assert told == ["small 1", "small 2", "big", "big's next"]
    assert await seqs(store, "doomed") == list(range(1, 12)) and await seqs(store, "ok") == [1, 2]
    assert lost == []
