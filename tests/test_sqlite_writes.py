"""Where SqliteStore commits: a small batch on the event loop's thread, a big one, or one
that meets another process's write lock, on a thread of its own while the loop goes on."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

from chat_agent.store import AppendEvents, CreateConversation, EventRecord, SqliteStore
from tests import pace

ALICE = "alice"


def _events(start: int, count: int, text: str = "x") -> AppendEvents:
    frames = tuple(EventRecord("c1", s, "content_chunk", None, text) for s in range(start, start + count))
    return AppendEvents(ALICE, "c1", frames)


async def _loop_stalls(during: asyncio.Future[None]) -> float:
    """The longest gap between two turns of the event loop until `during` is done."""
    worst, last = 0.0, time.monotonic()
    while not during.done():
        await asyncio.sleep(0.005)
        now = time.monotonic()
        worst, last = max(worst, now - last), now
    return worst


async def test_a_small_batch_commits_inline_and_is_read_back(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "chat.db") as store:
        await store.apply([CreateConversation(ALICE, "c1", 1.0)])
        commit = asyncio.ensure_future(store.apply([_events(1, 3)]))
        await asyncio.sleep(0)  # one turn of the loop: inline, the commit is already done
        assert commit.done()
        await commit
        assert [e.seq for e in await store.events_after(ALICE, "c1", 0)] == [1, 2, 3]


async def test_a_many_row_batch_commits_inline_when_the_loop_is_busy_and_on_the_thread_when_not(
        tmp_path: Path) -> None:
    """A busy loop holds the GIL most of the time: a thread doing sqlite3's steps would wait
    for it at every one, so the writer says `busy` and the batch is written inline."""
    async with SqliteStore(tmp_path / "chat.db") as store:
        await store.apply([CreateConversation(ALICE, "c1", 1.0)])
        for busy, start in ((False, 1), (True, 201)):
            commit = asyncio.ensure_future(store.apply([_events(start, 200)], busy=busy))
            await asyncio.sleep(0)
            assert commit.done() is busy
            await commit
        assert (await store.get_conversation(ALICE, "c1")).last_seq == 400
        big = "y" * 2_000_000  # a big write stays off the loop all the same
        commit = asyncio.ensure_future(store.apply([_events(401, 1, big)], busy=True))
        await asyncio.sleep(0)
        assert not commit.done()
        await commit


async def test_a_locked_database_is_waited_for_off_the_event_loop(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    async with SqliteStore(path) as store:
        await store.apply([CreateConversation(ALICE, "c1", 1.0)])
        # Another process's write transaction, as a second instance on the same file holds it.
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        release = threading.Timer(0.6, lambda: other.execute("COMMIT"))
        release.start()
        try:
            started = time.monotonic()
            commit = asyncio.ensure_future(store.apply([_events(1, 2)]))
            stall = await _loop_stalls(commit)
            await commit
            waited = time.monotonic() - started
        finally:
            release.join()
            other.close()
        assert waited >= 0.5  # it did wait for the lock, and did not fail
        assert stall < pace.scaled(0.3), f"the event loop stood still for {stall:.3f} s while the lock was held"
        assert [e.seq for e in await store.events_after(ALICE, "c1", 0)] == [1, 2]
        # The write connection is back to never waiting inline: the next small batch commits at once.
        await store.apply([_events(3, 1)])
        assert (await store.get_conversation(ALICE, "c1")).last_seq == 3


async def test_a_big_batch_commits_off_the_event_loop(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "chat.db") as store:
        await store.apply([CreateConversation(ALICE, "c1", 1.0)])
        big = "y" * 2_000_000
        commit = asyncio.ensure_future(store.apply([_events(1, 20, big)]))  # 40 MB of frames
        turns = 0
        while not commit.done():
            await asyncio.sleep(0)
            turns += 1
        await commit
        assert turns > 1  # the loop went on while it was written
        assert (await store.get_conversation(ALICE, "c1")).last_seq == 20


async def test_reads_never_see_a_batch_before_its_commit(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "chat.db") as store:
        await store.apply([CreateConversation(ALICE, "c1", 1.0)])
        big = "z" * 1_000_000
        commit = asyncio.ensure_future(store.apply([_events(1, 30, big)]))
        seen: set[int] = set()
        while not commit.done():
            seen.add(len(await store.events_after(ALICE, "c1", 0, limit=None)))
        await commit
        assert seen <= {0, 30}
        assert len(await store.events_after(ALICE, "c1", 0)) == 30


async def test_history_writes_are_not_compiled_again_for_each_history(tmp_path: Path) -> None:
    """A statement comparing a bare parameter with the column of a partial index is prepared
    again (its triggers compiled again) every time that parameter is bound: it made an item's
    insert 8x dearer. The authorizer is called only while a statement is compiled, so after
    one round of every history write none may call it."""
    from chat_agent.store import writes
    from chat_agent.store.ops import AppendHistory, DeleteHistoryItems, ReplaceHistory, UpsertHistoryItem
    from chat_agent.store.records import HistoryItem
    from chat_agent.store.schema import PRAGMAS

    async with SqliteStore(tmp_path / "chat.db") as store:
        await store.apply([CreateConversation(ALICE, "c1", 1.0)])
    db = sqlite3.connect(tmp_path / "chat.db", isolation_level=None)
    for pragma in PRAGMAS:
        db.execute(pragma)

    def round_of(n: int) -> list[tuple[str, list[tuple]]]:
        ops = []
        for history in ("visible", "model"):
            item = HistoryItem(f"{history}-{n}", {"role": "user", "parts": [{"type": "text", "text": "hi"}]}, 1, 2)
            ops += [AppendHistory(ALICE, "c1", history, (item,)), UpsertHistoryItem(ALICE, "c1", history, item),
                    DeleteHistoryItems(ALICE, "c1", history, (item.id,)),
                    ReplaceHistory(ALICE, "c1", history, (item,))]
        return [step for op in ops for step in writes.statements(op)]

    compiled: list[str] = []
    statement = [""]

    def counting(*_args: object) -> int:
        if statement[0]:
            compiled.append(statement[0])
        return sqlite3.SQLITE_OK

    db.set_authorizer(counting)  # (which expires every statement prepared before)
    for n in range(3):
        for sql, rows in round_of(n):
            statement[0] = sql if n else ""
            db.executemany(sql, rows)
    db.close()
    assert sorted(set(compiled)) == []
