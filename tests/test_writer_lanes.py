"""The writer's urgent lane, against a real SQLite file and a real PostgreSQL schema: bulk
writes are committed in bounded chunks, and a scope with urgent work queued goes ahead of
the other scopes' bulk rows with its own earlier writes, in order. Faults met mid-way (a
scope whose writes break a constraint, or that the store cannot take yet) keep what they
keep without the lane: nothing told that is not stored, nothing stored out of order.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3

import pytest

from chat_agent.store import AppendEvents, CreateConversation, EventRecord, Store, StoreWriter
from chat_agent.store.sqlite import SqliteStore
from chat_agent.urgency import Urgency
from tests.stores import Backend
from tests.test_writer import allow, refuse

OWNER = "u"
BULK = [f"bulk{i}" for i in range(12)]
FRAME = "x" * 900  # a chunk (CHUNK below) holds a few of these
CHUNK = 4096


def frames(cid: str, *seqs: int) -> AppendEvents:
    return AppendEvents(OWNER, cid, tuple(EventRecord(cid, s, "content_chunk", None, FRAME) for s in seqs))


async def seqs(store: Store, cid: str) -> list[int]:
    return [e.seq for e in await store.events_after(OWNER, cid, 0)]


@pytest.fixture
async def lanes(backend: Backend):
    store = backend.new()
    await store.open()
    writer = StoreWriter(store, retry_delay=0.05, chunk=CHUNK)
    writer.start()
    await writer.commit([CreateConversation(OWNER, cid, 1.0) for cid in [*BULK, "ui", "doomed"]])
    yield store, writer, backend
    await writer.close()
    await store.close()


@contextlib.asynccontextmanager
async def deferring(backend: Backend, cids: list[str], longest: float | None = None):
    """A store and a writer whose bulk defers to an `Urgency` (with its own longest pause, if
    given), the conversations `cids` created; closed afterwards."""
    store = backend.new()
    await store.open()
    urgency = Urgency() if longest is None else Urgency(longest=longest)
    writer = StoreWriter(store, retry_delay=0.05, chunk=CHUNK, urgency=urgency)
    writer.start()
    try:
        await writer.commit([CreateConversation(OWNER, cid, 1.0) for cid in cids])
        yield store, writer, urgency
    finally:
        await writer.close()
        await store.close()


def stream(writer: StoreWriter, told: list[str], seqs_: range, cids: list[str] = BULK) -> None:
    """Bulk frames of every conversation in `cids`, one submit per frame, round robin."""
    for seq in seqs_:
        for cid in cids:
            writer.submit([frames(cid, seq)], lambda cid=cid, seq=seq: told.append(f"{cid} {seq}"))


async def test_an_urgent_frame_goes_ahead_of_other_conversations_bulk_with_its_own_earlier_frames(lanes):
    store, writer, _ = lanes
    told: list[str] = []
    writer.submit([frames("ui", 1)], lambda: told.append("ui 1"))  # bulk, queued first
    stream(writer, told, range(1, 6))
    writer.submit([frames("ui", 2)], lambda: told.append("ui 2"), urgent=True)  # `done`, say
    await writer.flush()
    assert told[:2] == ["ui 1", "ui 2"]  # ahead of 60 bulk frames queued before it, its own first
    for cid in BULK:  # each conversation's frames still in order
        assert [t for t in told if t.startswith(f"{cid} ")] == [f"{cid} {s}" for s in range(1, 6)]
        assert await seqs(store, cid) == [1, 2, 3, 4, 5]
    assert await seqs(store, "ui") == [1, 2] and len(told) == 62


async def test_every_conversations_first_urgent_frame_goes_before_the_rest_of_any(lanes):
    """Turns that came in a burst while the writer commits: each one's first text, its other
    frames, its `done`, all queued before the writer looks again. The first texts are stored
    (and told) first, each with what its conversation wrote before it; then the rest, each
    `done` ahead of the bulk chunks still to write."""
    store, writer, _ = lanes
    told: list[str] = []
    turns = BULK[:4]

    def burst() -> None:
        for cid in turns:
            writer.submit([frames(cid, 1)], lambda cid=cid: told.append(f"{cid} 1"))  # the turn's start, bulk
            writer.submit([frames(cid, 2)], lambda cid=cid: told.append(f"{cid} 2"), urgent=True)  # first text
            for seq in range(3, 9):
                writer.submit([frames(cid, seq)], lambda cid=cid, seq=seq: told.append(f"{cid} {seq}"))
            writer.submit([frames(cid, 9)], lambda cid=cid: told.append(f"{cid} 9"), urgent=True)  # done
        stream(writer, told, range(2, 6), BULK[4:])  # other conversations' bulk, queued after

    def first_told() -> None:  # in the writer's round: the burst comes while it commits
        told.append(f"{BULK[4]} 1")
        burst()

    writer.submit([frames(BULK[4], 1)], first_told)
    for cid in BULK[5:]:
        writer.submit([frames(cid, 1)], lambda cid=cid: told.append(f"{cid} 1"))
    await writer.flush()
    await writer.flush()  # the burst, submitted meanwhile
    start = told.index(f"{turns[0]} 1")  # after the chunk under way when the burst came
    assert told[start:start + 8] == [f"{cid} {seq}" for cid in turns for seq in (1, 2)]
    assert max(told.index(f"{cid} 9") for cid in turns) < start + 8 + 4 * 7  # no other bulk before the dones
    for cid in BULK:
        expected = list(range(1, 10)) if cid in turns else list(range(1, 6))
        assert [int(t.split()[1]) for t in told if t.split()[0] == cid] == expected
        assert await seqs(store, cid) == expected


async def test_an_urgent_frame_is_stored_and_told_within_its_submit_while_the_writer_is_idle(lanes):
    """SQLite with its write lock free (`Store.apply_now`): the frame goes out in the step
    that made it, with its conversation's earlier frames, ahead of the bulk queued; not a pass
    of the event loop later (tens of ms under load). Elsewhere (PostgreSQL), the writer's
    next round, first."""
    store, writer, backend = lanes
    told: list[str] = []
    writer.submit([frames("ui", 1)], lambda: told.append("ui 1"))  # bulk: waits for a commit
    stream(writer, told, range(1, 3))
    writer.submit([frames("ui", 2)], lambda: told.append("ui 2"), urgent=True)
    assert told == (["ui 1", "ui 2"] if backend.name == "sqlite" else [])
    await writer.flush()
    assert told[:2] == ["ui 1", "ui 2"] and len(told) == 26
    assert await seqs(store, "ui") == [1, 2] and all([await seqs(store, cid) == [1, 2] for cid in BULK])


async def test_an_urgent_frame_meeting_another_process_s_write_lock_waits_for_the_writer(tmp_path):
    """Another process writing the SQLite file (a second instance, a backup) holds its write
    lock: the commit in the submitting step does not wait for it (that would stop the event
    loop); the writer's thread does, and the frame is told once it is in."""
    store = SqliteStore(tmp_path / "locked.db")
    await store.open()
    writer = StoreWriter(store, retry_delay=0.05)
    writer.start()
    other = sqlite3.connect(tmp_path / "locked.db", isolation_level=None)
    try:
        await writer.commit([CreateConversation(OWNER, "ui", 1.0)])
        other.execute("BEGIN IMMEDIATE")
        told: list[str] = []
        writer.submit([frames("ui", 1)], lambda: told.append("ui 1"), urgent=True)
        assert told == []
        await asyncio.sleep(0.2)
        assert told == []  # still locked out
        other.execute("COMMIT")
        await asyncio.wait_for(writer.flush(), 20)
        assert told == ["ui 1"] and await seqs(store, "ui") == [1]
    finally:
        other.close()
        await writer.close()
        await store.close()


async def test_an_urgent_frame_the_store_refuses_at_once_is_left_to_the_writer(lanes):
    """A commit in the submitting step that fails applies nothing and tells nothing: the
    writer meets the failure again and deals with it as with any (a scope lost, a store
    waited for)."""
    store, writer, backend = lanes
    refuse(backend, "doomed", how="constraint")
    told: list[str] = []
    writer.submit([frames("doomed", 1)], lambda: told.append("doomed 1"), urgent=True)
    assert told == []
    await writer.flush()
    assert told == [] and writer.lost("doomed") and await seqs(store, "doomed") == []
    writer.submit([frames("ui", 1)], lambda: told.append("ui 1"), urgent=True)
    await writer.flush()
    assert told == ["ui 1"] and await seqs(store, "ui") == [1]


async def test_urgent_work_submitted_while_bulk_commits_waits_for_one_chunk_at_most(lanes):
    store, writer, _ = lanes
    told: list[str] = []
    stream(writer, told, range(1, 11))  # 120 frames: ~30 chunks
    while not told:  # the first chunk is committed: the writer is under way with the rest
        await asyncio.sleep(0)
    writer.submit([frames("ui", 1)], lambda: told.append("ui 1"), urgent=True)
    await writer.flush()
    before = told.index("ui 1")
    assert 0 < before <= 2 * (CHUNK // len(FRAME))  # the chunk under way, and the one that was committing
    assert await seqs(store, "ui") == [1] and all([await seqs(store, cid) for cid in BULK])


async def test_a_scope_lost_mid_round_loses_what_its_later_chunks_hold(lanes):
    store, writer, backend = lanes
    refuse(backend, "doomed", how="constraint")
    told: list[str] = []
    stream(writer, told, range(1, 8), [*BULK[:4], "doomed"])  # doomed's frames spread over chunks
    writer.submit([frames("ui", 1)], lambda: told.append("ui 1"), urgent=True)
    await writer.flush()
    assert not [t for t in told if t.startswith("doomed")] and await seqs(store, "doomed") == []
    assert writer.lost("doomed") and "ui 1" in told
    for cid in BULK[:4]:
        assert await seqs(store, cid) == list(range(1, 8))


async def test_a_scope_the_store_cannot_take_yet_holds_its_later_chunks_back_in_order(lanes):
    store, writer, backend = lanes
    refuse(backend, "doomed", how="disk")
    told: list[str] = []
    stream(writer, told, range(1, 8), [*BULK[:4], "doomed"])
    assert await writer.availability.get() is False
    writer.submit([frames("doomed", 8)], lambda: told.append("doomed 8"), urgent=True)  # its abort's `done`
    await asyncio.sleep(0.2)
    assert not [t for t in told if t.startswith("doomed")] and await seqs(store, "doomed") == []
    allow(backend, "doomed")
    await asyncio.wait_for(writer.flush(), 10)
    assert [t for t in told if t.startswith("doomed")] == [f"doomed {s}" for s in range(1, 9)]
    assert await seqs(store, "doomed") == list(range(1, 9))
    for cid in BULK[:4]:
        assert await seqs(store, cid) == list(range(1, 8))


async def test_bulk_waits_while_urgent_work_is_under_way_and_an_urgent_write_does_not(backend: Backend):
    """An abort unwinding its turn elsewhere (chat_agent/urgency.py): the writer holds its bulk
    chunks back (once each, for the longest pause at most), and an urgent write that comes
    meanwhile is committed at once, not after the pause."""
    # A pause nobody sits out here: only the urgent write ends it.
    async with deferring(backend, [*BULK, "ui"], 30.0) as (store, writer, urgency):
        loop = asyncio.get_running_loop()
        told: list[str] = []
        with urgency.first(stop=True):  # an abort on its way to its `done`
            stream(writer, told, range(1, 11))  # ~30 chunks of bulk
            await asyncio.sleep(0.1)
            held = len(told)
            started = loop.time()
            ui: asyncio.Future[None] = loop.create_future()
            writer.submit([frames("ui", 1)], lambda: ui.set_result(None), urgent=True)
            await asyncio.wait_for(ui, 20)
            urgent_took = loop.time() - started
            at = len(told)
        await asyncio.wait_for(writer.flush(), 20)
        # Each chunk is held back once (then goes): while the urgent work lasts, the writer
        # got through two chunks at most (one before each of its two pauses).
        assert held <= CHUNK // len(FRAME) and at <= 2 * (CHUNK // len(FRAME)), (held, at)
        assert urgent_took < 10, f"the urgent write waited {urgent_took:.1f} s: it sat out the bulk's pause"
        assert len(told) == 120
        assert await seqs(store, "ui") == [1] and all([await seqs(store, cid) == list(range(1, 11)) for cid in BULK])


async def test_bulk_does_not_wait_for_a_first_text_on_its_way_to_its_turn(backend: Backend):
    """Urgent work that is not a stop (a stream's first item until its turn takes it) ends in
    an urgent write of its own, which a pause of the bulk would only hold up: the bulk goes on."""
    async with deferring(backend, BULK, 30.0) as (store, writer, urgency):
        told: list[str] = []
        with urgency.first():
            stream(writer, told, range(1, 11))
            await asyncio.wait_for(writer.flush(), 10)
            assert len(told) == 120


async def test_bulk_is_never_starved_by_urgent_work_that_does_not_end(backend: Backend):
    async with deferring(backend, BULK, 0.05) as (store, writer, urgency):
        told: list[str] = []
        urgency.begin()  # never ended while the bulk commits
        try:
            stream(writer, told, range(1, 4))  # ~9 chunks: each held back once, for 50 ms
            await asyncio.wait_for(writer.flush(), 30)
        finally:
            urgency.end()
        assert len(told) == 36 and all([await seqs(store, cid) == [1, 2, 3] for cid in BULK])


async def test_streams_pause_while_an_urgent_write_waits_for_its_commit_and_not_while_the_store_is_out(backend: Backend):
    """A `done` or a first text queued while the writer commits: other work pauses
    (chat_agent/urgency.py) until its commit is in, so that the writer's next look and the
    callback that sends it meet a short queue. One stored within its submit (SQLite, the
    writer idle) pauses nobody, nor does a write the store cannot take yet (a full disk)."""
    async with deferring(backend, [*BULK, "ui", "doomed"]) as (store, writer, urgency):
        told: list[str] = []
        paused: dict[str, bool] = {}
        stream(writer, told, range(2, 3))
        assert not urgency.pending  # bulk alone pauses nobody

        def first_told() -> None:  # in the writer's round: the urgent write waits for the next look
            writer.submit([frames("ui", 1)], lambda: paused.setdefault("when told", urgency.pending), urgent=True)
            paused["after submit"] = urgency.pending

        writer.submit([frames(BULK[0], 1)], first_told)
        await asyncio.wait_for(writer.flush(), 20)
        await asyncio.wait_for(writer.flush(), 20)  # the urgent write, submitted meanwhile
        assert paused == {"after submit": True, "when told": True} and not urgency.pending and len(told) == 12

        writer.submit([frames("ui", 2)], lambda: paused.setdefault("idle", urgency.pending), urgent=True)
        assert urgency.pending is (backend.name != "sqlite")  # stored at once on SQLite: nothing to wait for
        await asyncio.wait_for(writer.flush(), 20)
        assert not urgency.pending and await seqs(store, "ui") == [1, 2]

        refuse(backend, "doomed", how="disk")
        writer.submit([frames("doomed", 1)], lambda: told.append("doomed 1"), urgent=True)
        assert await asyncio.wait_for(writer.availability.get(), 20) is False
        assert not urgency.pending, "streams stayed paused behind a write the store could not take"
        writer.submit([frames("doomed", 2)], lambda: told.append("doomed 2"), urgent=True)
        assert not urgency.pending  # nothing to hurry while the store is out
        allow(backend, "doomed")
        await asyncio.wait_for(writer.flush(), 20)
        assert told[-2:] == ["doomed 1", "doomed 2"] and not urgency.pending
        assert await seqs(store, "doomed") == [1, 2]
    assert not urgency.pending


class _Recording(SqliteStore):
    """Says, of each batch, whether the writer told it the loop was busy, or committed it in
    the submitting step ("now")."""

    def __init__(self, path) -> None:
        super().__init__(path)
        self.busy: list[bool | str] = []

    async def apply(self, ops, fences=None, *, busy: bool = False) -> None:
        self.busy.append(busy)
        await super().apply(ops, fences, busy=busy)

    def apply_now(self, ops, fences=None) -> bool:
        done = super().apply_now(ops, fences)
        if done:
            self.busy.append("now")
        return done


async def test_urgent_writes_are_committed_as_on_a_busy_loop(tmp_path):
    """On the loop itself where the store can (SQLite): in the submitting step while the
    writer is idle, else in its round as on a busy loop, since a write thread's answer waits
    for the loop's next pass, which the first texts of 200 turns coming at once make long.
    Bulk writes on an idle loop still go to the thread."""
    store = _Recording(tmp_path / "busy.db")
    await store.open()
    writer = StoreWriter(store)
    writer.start()
    try:
        await writer.commit([CreateConversation(OWNER, "c", 1.0)])
        writer.submit([frames("c", *range(1, 41))], lambda: None)
        await writer.flush()
        bulk = store.busy[-1]
        writer.submit([frames("c", *range(41, 81))], lambda: None, urgent=True)
        now = store.busy[-1]
        writer.submit([frames("c", 81)], lambda: writer.submit([frames("c", *range(82, 122))], lambda: None,
                                                               urgent=True))
        await writer.flush()
        await writer.flush()  # the urgent write, submitted in the commit's callback
        assert (bulk, now, store.busy[-1]) == (False, "now", True)
        assert await seqs(store, "c") == list(range(1, 122))
    finally:
        await writer.close()
        await store.close()
