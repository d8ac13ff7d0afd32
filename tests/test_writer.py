"""The group-commit writer against a real SQLite file and a real PostgreSQL schema made to fail
for one conversation, and fenced by conversation leases.

The failure is the store's own: a trigger, installed through a second connection the way an
operator (or a corrupt row) would change the database, refuses that conversation's events.
"""

from __future__ import annotations

import asyncio

import pytest

from chat_agent.store import (AppendEvents, CreateConversation, EventRecord, FencedOut, MemoriesRecord, NotStored,
                              SetMemories, SetTitle, Store, StoreWriter)
from tests.stores import Backend

OWNER = "u"

# How a refused insert fails: a broken constraint (never retried: lost), or an error at run
# time such as a full or failing disk gives (waited out: tried again until the store takes it).
HOW = {
    "sqlite": {"constraint": "SELECT RAISE(ABORT, 'refused')", "disk": "SELECT json('{')"},
    "postgres": {"constraint": "check_violation", "disk": "disk_full"},
}


def events(cid: str, *seqs: int) -> AppendEvents:
    return AppendEvents(OWNER, cid, tuple(EventRecord(cid, s, "pong", None, "{}") for s in seqs))


def refuse(backend: Backend, cid: str, *, how: str = "constraint") -> None:
    """Makes every event insert of `cid` fail, `how` says in which way."""
    what = HOW[backend.name][how]
    if backend.name == "sqlite":
        backend.sql(f"CREATE TRIGGER refuse_{cid} BEFORE INSERT ON events WHEN NEW.conversation_id = '{cid}'"
                    f" BEGIN {what}; END")
        return
    backend.sql(f"CREATE FUNCTION refuse_{cid}() RETURNS trigger LANGUAGE plpgsql AS $$"
                f" BEGIN RAISE EXCEPTION 'refused' USING ERRCODE = '{what}'; END $$")
    backend.sql(f"CREATE TRIGGER refuse_{cid} BEFORE INSERT ON events FOR EACH ROW"
                f" WHEN (NEW.conversation_id = '{cid}') EXECUTE FUNCTION refuse_{cid}()")


def allow(backend: Backend, cid: str) -> None:
    backend.sql(f"DROP TRIGGER refuse_{cid}" + ("" if backend.name == "sqlite" else " ON events"))


@pytest.fixture
async def setup(backend: Backend):
    store = backend.new()
    await store.open()
    writer = StoreWriter(store, retry_delay=0.05)
    seen: list[str] = []

    def lost() -> list[str]:
        """The scopes the writer reported lost so far (its `losses` queue), in order."""
        while not writer.losses.empty():
            seen.append(writer.losses.get_nowait())
        return seen

    writer.start()
    await writer.commit([CreateConversation(OWNER, "ok", 1.0), CreateConversation(OWNER, "doomed", 1.0)])
    yield store, writer, backend, lost
    await writer.close()
    await store.close()


async def seqs(store: Store, cid: str) -> list[int]:
    return [e.seq for e in await store.events_after(OWNER, cid, 0)]


async def test_a_failing_conversation_loses_only_its_own_writes(setup):
    store, writer, backend, lost = setup
    refuse(backend, "doomed", how="constraint")
    told: list[str] = []
    memories = MemoriesRecord(["short"], ["likes tea"], 2.0)
    writer.submit([events("ok", 1)], lambda: told.append("ok 1"))
    writer.submit([events("doomed", 1)], lambda: told.append("doomed 1"))
    writer.submit([SetMemories(OWNER, memories)], lambda: told.append("memories"))
    writer.submit([events("ok", 2)], lambda: told.append("ok 2"))
    await writer.flush()
    assert told == ["ok 1", "memories", "ok 2"]  # in order, and never what was not stored
    assert lost() == ["doomed"]
    assert await seqs(store, "ok") == [1, 2] and await seqs(store, "doomed") == []
    assert await store.get_memories(OWNER) == memories


async def test_a_write_the_store_cannot_take_yet_waits_in_order_and_nothing_is_lost(setup):
    """A full disk (here: for one conversation) is waited out: the others commit, the refused
    writes are tried again, in order, and stored once the disk takes them; the writer says it
    was unavailable meanwhile, and nothing is lost."""
    store, writer, backend, lost = setup
    refuse(backend, "doomed", how="disk")
    told: list[str] = []
    writer.submit([events("ok", 1)], lambda: told.append("ok 1"))
    writer.submit([events("doomed", 1)], lambda: told.append("doomed 1"))
    writer.submit([events("ok", 2)], lambda: told.append("ok 2"))
    assert await writer.availability.get() is False
    assert writer.unavailable and told == ["ok 1", "ok 2"]
    writer.submit([events("doomed", 2)], lambda: told.append("doomed 2"))
    writer.submit([events("ok", 3)], lambda: told.append("ok 3"))
    flushed = asyncio.ensure_future(writer.flush())
    await asyncio.sleep(0.3)  # several attempts, each refused
    assert not flushed.done() and await seqs(store, "doomed") == []
    allow(backend, "doomed")
    await asyncio.wait_for(flushed, 10)
    assert await writer.availability.get() is True and not writer.unavailable
    assert told == ["ok 1", "ok 2", "ok 3", "doomed 1", "doomed 2"] and lost() == []
    assert await seqs(store, "doomed") == [1, 2] and await seqs(store, "ok") == [1, 2, 3]


async def test_a_lost_conversation_is_refused_until_reopened(setup):
    store, writer, backend, lost = setup
    refuse(backend, "doomed")
    writer.submit([events("doomed", 1)])
    await writer.flush()
    allow(backend, "doomed")  # the disk is fine again, but what is in memory still builds on seq 1
    told: list[str] = []
    writer.submit([events("doomed", 2)], lambda: told.append("doomed 2"))
    with pytest.raises(NotStored):
        await writer.commit([events("doomed", 3)])
    await writer.flush()
    assert writer.lost("doomed") and told == [] and await seqs(store, "doomed") == []
    writer.reopen("doomed")  # its owner reloaded it from the store
    await writer.commit([events("doomed", 1)])
    assert await seqs(store, "doomed") == [1] and lost() == ["doomed"]


async def test_writes_queued_behind_a_lost_one_are_lost_with_it(setup):
    store, writer, backend, lost = setup
    refuse(backend, "doomed")
    writer.submit([events("doomed", 1)])
    told: list[str] = []
    writer.submit([events("doomed", 2)], lambda: told.append("doomed 2"))
    writer.submit([events("ok", 1)], lambda: told.append("ok 1"))
    await writer.flush()
    allow(backend, "doomed")
    assert told == ["ok 1"] and lost() == ["doomed"]
    assert await seqs(store, "doomed") == [] and await seqs(store, "ok") == [1]


async def test_one_submission_over_two_conversations_is_told_only_if_both_are_stored(setup):
    store, writer, backend, lost = setup
    refuse(backend, "doomed")
    told: list[str] = []
    writer.submit([events("ok", 1), events("doomed", 1)], lambda: told.append("both"))
    await writer.flush()
    assert told == [] and await seqs(store, "ok") == [1] and lost() == ["doomed"]


async def test_a_big_write_does_not_hold_up_other_conversations(setup):
    """One conversation writes 2 MB in the batch; the other's frames are committed and
    handed over first, in a transaction of their own, and both end up stored in order."""
    store, writer, backend, lost = setup
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
    assert lost() == []


async def test_a_fenced_out_conversation_is_lost_at_once_and_the_others_commit(setup):
    """The lease of "doomed" changed hands since the writer was told its epoch: its batch is
    refused whole by the store, lost at once (no retries), and the rest of the batch commits."""
    store, writer, backend, lost = setup
    mine = await store.claim_lease("doomed", "me", 30)
    ours = await store.claim_lease("ok", "me", 30)
    assert mine is not None and ours is not None
    writer.fence("doomed", "me", mine.epoch)
    writer.fence("ok", "me", ours.epoch)
    await writer.commit([events("doomed", 1), events("ok", 1)])  # held: stored
    backend.sql("UPDATE leases SET expires_at = 0 WHERE conversation_id = 'doomed'")
    theirs = await store.claim_lease("doomed", "other", 30)  # another instance takes it over
    assert theirs is not None and theirs.epoch == mine.epoch + 1
    told: list[str] = []
    writer.submit([events("doomed", 2)], lambda: told.append("doomed 2"))
    writer.submit([events("ok", 2)], lambda: told.append("ok 2"))
    writer.submit([SetTitle(OWNER, "doomed", "stale")], lambda: told.append("title"))
    writer.submit([events("ok", 3)], lambda: told.append("ok 3"))
    await writer.flush()
    assert told == ["ok 2", "ok 3"] and lost() == ["doomed"] and writer.lost("doomed")
    assert await seqs(store, "doomed") == [1] and await seqs(store, "ok") == [1, 2, 3]
    assert (await store.get_conversation(OWNER, "doomed")).title is None  # type: ignore[union-attr]
    with pytest.raises(NotStored):  # refused until reopened
        await writer.commit([events("doomed", 2)])
    # Expiry alone does not fence: only a takeover does.
    backend.sql("UPDATE leases SET expires_at = 0 WHERE conversation_id = 'ok'")
    await writer.commit([events("ok", 4)])
    writer.unfence("ok")
    await store.release_lease("ok", "me", ours.epoch)
    await writer.commit([events("ok", 5)])  # unfenced: no lease needed
    assert await seqs(store, "ok") == [1, 2, 3, 4, 5] and lost() == ["doomed"]


async def test_a_fence_is_taken_when_submitted(setup):
    """A submit carries the lease its scope had then: writes queued under an epoch that was
    lost stay fenced with it, even if the instance claims the conversation again meanwhile."""
    store, writer, backend, lost = setup
    first = await store.claim_lease("doomed", "me", 30)
    assert first is not None
    writer.fence("doomed", "me", first.epoch)
    writer.submit([events("doomed", 1)])
    await store.release_lease("doomed", "me", first.epoch)
    again = await store.claim_lease("doomed", "me", 30)
    assert again is not None and again.epoch == first.epoch + 1  # a release ends a tenure
    writer.fence("doomed", "me", again.epoch)
    await writer.flush()
    assert lost() == ["doomed"] and await seqs(store, "doomed") == []
    writer.reopen("doomed")
    await writer.commit([events("doomed", 1)])
    assert await seqs(store, "doomed") == [1]
