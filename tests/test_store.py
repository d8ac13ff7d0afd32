"""The store against a real SQLite file and a real PostgreSQL schema: every op and read, owners,
atomicity, durability."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from chat_agent.store import (
    AppendEvents,
    AppendHistory,
    ConstraintError,
    CreateConversation,
    DeleteConversation,
    EventRecord,
    FinishTurn,
    HistoryItem,
    HistorySize,
    PruneEvents,
    RecordClientMessageId,
    ReplaceHistory,
    SetTitle,
    PostgresStore,
    SqliteStore,
    StartTurn,
    Store,
    StoreError,
    TurnRecord,
    UpsertHistoryItem,
    create_store,
)
from chat_agent.store import schema
from chat_agent.store.writes import plan
from tests import pg, reaper
from tests.stores import Backend

REPO = Path(__file__).resolve().parents[1]
ALICE, BOB = "alice", "bob"


def event(cid: str, seq: int, turn_id: str | None = "t1") -> EventRecord:
    frame = f'{{"type":"content_chunk","conversationId":"{cid}","seq":{seq},"content":"é"}}'
    return EventRecord(cid, seq, "content_chunk", turn_id, frame)


def item(id: str, text: str = "hi") -> HistoryItem:
    data = {"role": "user", "content": [{"type": "text", "text": text}]}
    return HistoryItem(id, data, 3, len(text))


def turn(tid: str, cid: str = "c1", owner: str = ALICE, started_at: float = 10.0) -> TurnRecord:
    return TurnRecord(tid, cid, owner, "m-" + tid, "running", started_at, first_seq=1)


def events_op(cid: str, seqs: range, owner: str = ALICE, at: float = 5.0) -> AppendEvents:
    return AppendEvents(owner, cid, tuple(event(cid, s) for s in seqs), updated_at=at)


@pytest_asyncio.fixture
async def store(backend: Backend, tmp_path: Path) -> AsyncIterator[Store]:
    if backend.name == "sqlite":  # the directories are created too
        backend.where = tmp_path / "nested" / "dir" / "chat.db"
    async with backend.new() as opened:
        await opened.apply([CreateConversation(ALICE, "c1", created_at=1.0)])
        yield opened


@pytest.mark.asyncio
async def test_create_get_list_and_title(store: Store) -> None:
    conv = await store.get_conversation(ALICE, "c1")
    assert conv is not None
    assert (conv.id, conv.owner, conv.title, conv.created_at, conv.updated_at, conv.last_seq) == (
        "c1", ALICE, None, 1.0, 1.0, 0,
    )
    await store.apply([SetTitle(ALICE, "c1", "Trip to Lyon")])
    conv = await store.get_conversation(ALICE, "c1")
    assert conv is not None and conv.title == "Trip to Lyon"
    assert await store.get_conversation(ALICE, "nope") is None


@pytest.mark.asyncio
async def test_list_is_newest_activity_first_with_limit(store: Store) -> None:
    await store.apply([CreateConversation(ALICE, "c2", 2.0), CreateConversation(ALICE, "c3", 3.0)])
    await store.apply([events_op("c1", range(1, 2), at=9.0)])
    assert [c.id for c in await store.list_conversations(ALICE)] == ["c1", "c3", "c2"]
    assert [c.id for c in await store.list_conversations(ALICE, limit=2)] == ["c1", "c3"]
    # updated_at only rises: an older time stamp arriving late does not reorder the list.
    await store.apply([events_op("c1", range(2, 3), at=4.0)])
    assert (await store.get_conversation(ALICE, "c1")).updated_at == 9.0  # type: ignore[union-attr]


@pytest.mark.asyncio
async def test_list_pages_by_keyset_with_ties_and_windows(store: Store) -> None:
    # c1 at 1.0; five more, three of them tied at 2.0
    await store.apply([CreateConversation(ALICE, cid, at) for cid, at in
                       [("c2", 2.0), ("c3", 2.0), ("c4", 2.0), ("c5", 3.0), ("c6", 0.5)]])
    await store.apply([CreateConversation(BOB, "b1", 2.0)])
    order = ["c5", "c4", "c3", "c2", "c1", "c6"]  # updated_at descending, ties by id descending
    assert [c.id for c in await store.list_conversations(ALICE)] == order
    seen: list[str] = []
    after = None
    while True:
        page = await store.list_conversations(ALICE, 2, after=after)
        if not page:
            break
        seen += [c.id for c in page]
        after = (page[-1].updated_at, page[-1].id)
    assert seen == order  # every one once, across the tie, bob's never
    assert [c.id for c in await store.list_conversations(ALICE, until=2.0)] == ["c4", "c3", "c2", "c1", "c6"]
    assert [c.id for c in await store.list_conversations(ALICE, since=1.0)] == ["c5", "c4", "c3", "c2"]
    assert [c.id for c in await store.list_conversations(ALICE, since=0.5, until=2.0, after=(2.0, "c3"))] == [
        "c2", "c1"]


@pytest.mark.asyncio
async def test_history_pages_and_size(store: Store) -> None:
    items = [item(f"m{n}", "x" * n) for n in range(7)]
    await store.apply([AppendHistory(ALICE, "c1", "visible", tuple(items)),
                       AppendHistory(ALICE, "c1", "model", (item("a", "abc"),))])
    newest = await store.history_page(ALICE, "c1", "visible", None, 3)
    assert newest is not None and [i.id for i in newest.items] == ["m4", "m5", "m6"] and newest.more
    older = await store.history_page(ALICE, "c1", "visible", "m4", 3)
    assert older is not None and [i.id for i in older.items] == ["m1", "m2", "m3"] and older.more
    oldest = await store.history_page(ALICE, "c1", "visible", "m1", 3)
    assert oldest is not None and [i.id for i in oldest.items] == ["m0"] and not oldest.more
    assert oldest.items[0] == items[0]
    exact = await store.history_page(ALICE, "c1", "visible", "m3", 3)
    assert exact is not None and [i.id for i in exact.items] == ["m0", "m1", "m2"] and not exact.more
    # an upsert keeps its item's place, so pages stay where they were
    await store.apply([UpsertHistoryItem(ALICE, "c1", "visible", item("m2", "edited"))])
    again = await store.history_page(ALICE, "c1", "visible", "m3", 1)
    assert again is not None and again.items == [item("m2", "edited")]
    assert await store.history_page(ALICE, "c1", "visible", "nope", 3) is None
    assert await store.history_page(ALICE, "c1", "model", "m3", 3) is None  # an id of the other history
    assert await store.history_page(BOB, "c1", "visible", "m3", 3) is None
    bobs = await store.history_page(BOB, "c1", "visible", None, 3)
    assert bobs is not None and bobs.items == [] and not bobs.more
    assert await store.history_size(ALICE, "c1", "visible") == HistorySize(7, 21, 25)  # 0+1+...+6 chars, m2 now "edited"
    assert await store.history_size(ALICE, "c1", "model") == HistorySize(1, 3, 3)
    assert await store.history_size(BOB, "c1", "model") == HistorySize()


@pytest.mark.asyncio
async def test_events_round_trip_in_seq_order(store: Store) -> None:
    await store.apply([AppendEvents(ALICE, "c1", (event("c1", 2), event("c1", 1)), 6.0)])
    await store.apply([events_op("c1", range(3, 11), at=7.0)])
    got = await store.events_after(ALICE, "c1", 0)
    assert [e.seq for e in got] == list(range(1, 11))
    assert got[0] == event("c1", 1)
    assert [e.seq for e in await store.events_after(ALICE, "c1", 7)] == [8, 9, 10]
    assert [e.seq for e in await store.events_after(ALICE, "c1", 2, limit=3)] == [3, 4, 5]
    conv = await store.get_conversation(ALICE, "c1")
    assert conv is not None and (conv.last_seq, conv.updated_at) == (10, 7.0)


@pytest.mark.asyncio
async def test_prune_keeps_last_seq(store: Store) -> None:
    await store.apply([events_op("c1", range(1, 6))])
    await store.apply([PruneEvents(ALICE, "c1", before_seq=4)])
    assert [e.seq for e in await store.events_after(ALICE, "c1", 0)] == [4, 5]
    await store.apply([PruneEvents(ALICE, "c1", before_seq=100)])
    assert await store.events_after(ALICE, "c1", 0) == []
    assert (await store.get_conversation(ALICE, "c1")).last_seq == 5  # type: ignore[union-attr]


@pytest.mark.asyncio
async def test_histories_append_upsert_replace(store: Store) -> None:
    await store.apply([
        AppendHistory(ALICE, "c1", "visible", (item("a"), item("b"))),
        AppendHistory(ALICE, "c1", "visible", (item("c"),)),
        AppendHistory(ALICE, "c1", "model", (item("a"),)),
    ])
    assert [i.id for i in await store.load_history(ALICE, "c1", "visible")] == ["a", "b", "c"]
    assert await store.load_history(ALICE, "c1", "model") == [item("a")]

    await store.apply([
        UpsertHistoryItem(ALICE, "c1", "visible", item("b", "edited")),
        UpsertHistoryItem(ALICE, "c1", "visible", item("d", "new")),
    ])
    visible = await store.load_history(ALICE, "c1", "visible")
    assert [i.id for i in visible] == ["a", "b", "c", "d"]
    assert visible[1] == item("b", "edited")

    summary = HistoryItem("s", {"role": "user", "content": "summary…"}, 40, 8)
    await store.apply([
        ReplaceHistory(ALICE, "c1", "model", (summary,)),
        AppendHistory(ALICE, "c1", "model", (item("e"),)),
    ])
    assert [i.id for i in await store.load_history(ALICE, "c1", "model")] == ["s", "e"]
    assert (await store.load_history(ALICE, "c1", "model"))[0] == summary
    assert len(await store.load_history(ALICE, "c1", "visible")) == 4  # untouched
    await store.apply([ReplaceHistory(ALICE, "c1", "visible", ())])
    assert await store.load_history(ALICE, "c1", "visible") == []


@pytest.mark.asyncio
async def test_turns_and_usage_totals(store: Store) -> None:
    await store.apply([StartTurn(turn("t2", started_at=2)), StartTurn(turn("t1", started_at=1))])
    assert [t.id for t in await store.running_turns()] == ["t1", "t2"]
    usage = {"inputTokens": 10, "outputTokens": 5, "server": {"searches": 1}}
    await store.apply([FinishTurn(ALICE, "c1", "t1", "complete", "end_turn", usage, 3.0)])
    assert await store.get_turn(ALICE, "t1") == TurnRecord(
        "t1", "c1", ALICE, "m-t1", "complete", 1.0, 1, 3.0, "end_turn", usage
    )
    assert [t.id for t in await store.running_turns()] == ["t2"]
    # A running turn's partial usage is not counted; aborted turns are.
    partial = TurnRecord("t3", "c1", ALICE, "m3", "running", 4.0, 9, usage={"inputTokens": 99})
    await store.apply([StartTurn(partial)])
    await store.apply([FinishTurn(ALICE, "c1", "t2", "aborted", "aborted", {"inputTokens": 7}, 5)])
    assert await store.usage_totals(ALICE, "c1") == {"inputTokens": 17, "outputTokens": 5}
    assert await store.get_turn(ALICE, "missing") is None


@pytest.mark.asyncio
async def test_a_live_view_is_one_snapshot_while_the_owner_commits(store: Store) -> None:
    """What another instance reads for a `session`: the last seq, the running turn, its frames
    and the visible history as of one moment, however fast the owner commits meanwhile."""
    assert await store.live_view(BOB, "c1", 10) is None
    await store.apply([StartTurn(turn("t1")), AppendHistory(ALICE, "c1", "visible", (item("u1"),))])
    views, stop = [], asyncio.Event()

    async def owner() -> None:
        # 200 commits at least, and on until the reader has read a few views in between (on a
        # loaded machine the reader's thread may get few turns while the commits run).
        seq = 0
        while seq < 200 or len(views) <= 5:
            seq += 1
            await store.apply([events_op("c1", range(seq, seq + 1))])
            await asyncio.sleep(0)
        stop.set()

    async def reader() -> None:
        while not stop.is_set():
            views.append(await store.live_view(ALICE, "c1", 10))

    await asyncio.gather(owner(), reader())
    assert len(views) > 5
    for view in views:
        assert view is not None and [t.id for t in view.turns] == ["t1"]
        assert [e.seq for e in view.events] == list(range(1, view.record.last_seq + 1))
        assert [i.id for i in view.page.items] == ["u1"] and not view.page.more


@pytest.mark.asyncio
async def test_client_message_ids(store: Store) -> None:
    assert not await store.has_client_message_id(ALICE, "c1", "m1")
    await store.apply([RecordClientMessageId(ALICE, "c1", "m1")])
    await store.apply([RecordClientMessageId(ALICE, "c1", "m1")])  # a repeat is not an error
    assert await store.has_client_message_id(ALICE, "c1", "m1")
    assert not await store.has_client_message_id(ALICE, "c1", "m2")


async def _fill(store: Store, cid: str) -> None:
    await store.apply([
        events_op(cid, range(1, 4)),
        AppendHistory(ALICE, cid, "visible", (item("a"),)),
        AppendHistory(ALICE, cid, "model", (item("a"),)),
        StartTurn(turn("t-" + cid, cid)),
        FinishTurn(ALICE, cid, "t-" + cid, "complete", "end_turn", {"inputTokens": 1}, 2.0),
        RecordClientMessageId(ALICE, cid, "m1"),
    ])


@pytest.mark.asyncio
async def test_another_owner_sees_nothing_and_changes_nothing(store: Store) -> None:
    await _fill(store, "c1")
    before = await _snapshot(store, ALICE)
    assert await _snapshot(store, BOB) == (None, [], [], [], None, {}, False)

    await store.apply([
        SetTitle(BOB, "c1", "mine now"),
        events_op("c1", range(4, 6), owner=BOB),
        PruneEvents(BOB, "c1", 100),
        AppendHistory(BOB, "c1", "visible", (item("x"),)),
        UpsertHistoryItem(BOB, "c1", "visible", item("a", "overwritten")),
        ReplaceHistory(BOB, "c1", "model", ()),
        StartTurn(turn("t-bob", "c1", owner=BOB)),
        FinishTurn(BOB, "c1", "t-c1", "error", "error", {"inputTokens": 1000}, 9.0),
        RecordClientMessageId(BOB, "c1", "m2"),
        DeleteConversation(BOB, "c1"),
    ])
    assert await _snapshot(store, ALICE) == before
    assert await store.get_turn(ALICE, "t-bob") is None
    assert not await store.has_client_message_id(ALICE, "c1", "m2")


@pytest.mark.asyncio
async def test_ops_on_a_missing_conversation_are_no_ops(store: Store, backend: Backend) -> None:
    await _fill(store, "gone")  # never created
    assert await store.running_turns() == []
    assert _row_counts(backend) == {
        "conversations": 1, "history_items": 0, "events": 0, "turns": 0, "client_message_ids": 0
    }
    assert await store.list_conversations(ALICE) == [await store.get_conversation(ALICE, "c1")]


async def _snapshot(store: Store, owner: str) -> tuple[object, ...]:
    return (
        await store.get_conversation(owner, "c1"),
        await store.list_conversations(owner),
        await store.load_history(owner, "c1", "visible"),
        await store.events_after(owner, "c1", 0),
        await store.get_turn(owner, "t-c1"),
        await store.usage_totals(owner, "c1"),
        await store.has_client_message_id(owner, "c1", "m1"),
    )


@pytest.mark.asyncio
async def test_a_failing_batch_leaves_nothing_behind(store: Store) -> None:
    await store.apply([events_op("c1", range(1, 3))])
    before = await _snapshot(store, ALICE)
    with pytest.raises(ConstraintError):
        await store.apply([
            CreateConversation(ALICE, "c2", 3.0),
            events_op("c2", range(1, 4)),
            SetTitle(ALICE, "c1", "changed"),
            AppendHistory(ALICE, "c1", "visible", (item("a"),)),
            events_op("c1", range(3, 5)),
            AppendEvents(ALICE, "c1", (event("c1", 2),), 9.0),  # seq 2 is already stored
        ])
    assert await _snapshot(store, ALICE) == before
    assert await store.get_conversation(ALICE, "c2") is None
    await store.apply([events_op("c1", range(3, 4))])  # the store is still usable
    assert (await store.get_conversation(ALICE, "c1")).last_seq == 3  # type: ignore[union-attr]


@pytest.mark.asyncio
async def test_constraint_errors(store: Store) -> None:
    with pytest.raises(ConstraintError):
        await store.apply([CreateConversation(ALICE, "c1", 2.0)])
    with pytest.raises(ConstraintError):
        await store.apply([AppendHistory(ALICE, "c1", "visible", (item("a"), item("a")))])
    with pytest.raises(ConstraintError):
        bad = AppendHistory(ALICE, "c1", "other", (item("a"),))  # type: ignore[arg-type]
        await store.apply([bad])
    with pytest.raises(ValueError):
        AppendEvents(ALICE, "c1", (event("c2", 1),))
    with pytest.raises(TypeError):
        await store.apply([object()])  # type: ignore[list-item]
    await store.apply([])


@pytest.mark.asyncio
async def test_delete_cascades(store: Store, backend: Backend) -> None:
    await store.apply([CreateConversation(ALICE, "c2", 1.0)])
    await _fill(store, "c1")
    await _fill(store, "c2")
    await store.apply([StartTurn(turn("t-run", "c1"))])
    await store.apply([DeleteConversation(ALICE, "c1")])
    assert await store.get_conversation(ALICE, "c1") is None
    assert await store.running_turns() == []
    counts = _row_counts(backend)
    assert counts == {"conversations": 1, "history_items": 2, "events": 3, "turns": 1,
                      "client_message_ids": 1}
    # The same id starts empty: nothing of the old conversation was left to reappear.
    await store.apply([CreateConversation(ALICE, "c1", 8.0)])
    assert await _snapshot(store, ALICE) == (
        await store.get_conversation(ALICE, "c1"), await store.list_conversations(ALICE),
        [], [], None, {}, False,
    )


def _row_counts(backend: Backend) -> dict[str, int]:
    tables = ("conversations", "history_items", "events", "turns", "client_message_ids")
    return {t: backend.count(t) for t in tables}


@pytest.mark.asyncio
async def test_one_batch_keeps_each_conversations_order(store: Store) -> None:
    ops = [CreateConversation(ALICE, "c2", 1.0)]
    for n in range(3):
        for cid in ("c1", "c2"):
            ops += [events_op(cid, range(n + 1, n + 2)),
                    UpsertHistoryItem(ALICE, cid, "visible", item(f"i{n}"))]
    ops += [DeleteConversation(ALICE, "c2"), CreateConversation(ALICE, "c2", 2.0),
            AppendHistory(ALICE, "c2", "visible", (item("fresh"),))]
    assert len(plan(ops)) == 6  # 14 ops: create, events, history, delete, create, history
    await store.apply(ops)
    assert [i.id for i in await store.load_history(ALICE, "c1", "visible")] == ["i0", "i1", "i2"]
    assert [i.id for i in await store.load_history(ALICE, "c2", "visible")] == ["fresh"]
    assert (await store.get_conversation(ALICE, "c2")).last_seq == 0  # type: ignore[union-attr]
    assert [e.seq for e in await store.events_after(ALICE, "c1", 0)] == [1, 2, 3]


@pytest.mark.asyncio
async def test_reads_never_see_half_a_batch(store: Store) -> None:
    async def write(cid: str) -> None:
        # Create sets last_seq to 0, the events raise it to 30 a statement later.
        await store.apply([CreateConversation(ALICE, cid, 1.0), events_op(cid, range(1, 31))])

    async def read(cid: str) -> None:
        while (conv := await store.get_conversation(ALICE, cid)) is None:
            pass
        assert conv.last_seq == 30

    for n in range(20):
        await asyncio.gather(read(f"k{n}"), write(f"k{n}"), read(f"k{n}"))


@pytest.mark.asyncio
async def test_survives_close_and_reopen(backend: Backend) -> None:
    async with backend.new() as store:
        await _fill_created(store)
        before = await _snapshot(store, ALICE)
    async with backend.new() as store:
        await store.open()  # idempotent
        assert await _snapshot(store, ALICE) == before
    if backend.name == "sqlite":
        assert backend.sql("PRAGMA journal_mode")[0][0] == "wal"
    assert backend.sql("SELECT version FROM schema_version ORDER BY version") == [
        (n,) for n in range(1, schema.SCHEMA_VERSION + 1)]


async def _fill_created(store: Store) -> None:
    await store.apply([CreateConversation(ALICE, "c1", 1.0), SetTitle(ALICE, "c1", "t")])
    await _fill(store, "c1")


@pytest.mark.asyncio
async def test_a_newer_schema_is_refused(backend: Backend) -> None:
    async with backend.new():
        pass
    backend.sql("INSERT INTO schema_version VALUES (99, 0)")
    with pytest.raises(StoreError, match="newer"):
        await backend.new().open()
    with pytest.raises(StoreError, match="not open"):
        await backend.new().get_conversation(ALICE, "c1")


CRASH_CHILD = textwrap.dedent("""
    import asyncio, os, signal, sys
    from chat_agent.store import *

    async def main():
        store = SqliteStore(sys.argv[1])
        await store.open()
        events = tuple(EventRecord("c1", s, "content_chunk", "t1", "{}") for s in range(1, 201))
        await store.apply([
            CreateConversation("alice", "c1", 1.0),
            AppendEvents("alice", "c1", events, 2.0),
            AppendHistory("alice", "c1", "visible", (HistoryItem("a", {"x": 1}, 1, 1),)),
            StartTurn(TurnRecord("t1", "c1", "alice", "m1", "running", 1.0, 1)),
        ])
        os.kill(os.getpid(), signal.SIGKILL)  # no close, no checkpoint, no atexit

    asyncio.run(main())
""")


@pytest.mark.asyncio
async def test_an_applied_batch_survives_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    child = await reaper.spawn_async(
        sys.executable, "-c", CRASH_CHILD, str(path), cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(child.communicate(), timeout=30)
    assert child.returncode == -signal.SIGKILL, stderr.decode()
    assert Path(f"{path}-wal").exists()  # the batch is recovered from the WAL, not the main file
    async with SqliteStore(path) as store:
        conv = await store.get_conversation(ALICE, "c1")
        assert conv is not None and conv.last_seq == 200
        assert len(await store.events_after(ALICE, "c1", 0)) == 200
        assert [i.id for i in await store.load_history(ALICE, "c1", "visible")] == ["a"]
        assert [t.id for t in await store.running_turns()] == ["t1"]


@pytest.mark.asyncio
async def test_create_store_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    default = create_store(None, tmp_path / "data")
    assert isinstance(default, SqliteStore) and default.path == tmp_path / "data" / "chat-agent.db"
    empty = create_store("", tmp_path)
    assert isinstance(empty, SqliteStore) and empty.path == tmp_path / "chat-agent.db"
    absolute = create_store(f"sqlite:///{tmp_path}/abs.db", Path("unused"))
    assert absolute.path == tmp_path / "abs.db"  # type: ignore[attr-defined]
    monkeypatch.chdir(tmp_path)
    relative = create_store("sqlite:///rel/x.db", Path("unused"))
    async with relative:
        pass
    assert (tmp_path / "rel" / "x.db").exists()
    async with create_store("sqlite:///:memory:", tmp_path) as memory:
        await memory.apply([CreateConversation(ALICE, "m", 1.0), events_op("m", range(1, 3))])
        assert (await memory.get_conversation(ALICE, "m")).last_seq == 2  # type: ignore[union-attr]
    for url in ("postgresql://u:secret@db/chat", "postgres://u:secret@db/chat?sslmode=disable"):
        pg = create_store(url, tmp_path)
        assert isinstance(pg, PostgresStore) and pg.url == url and "secret" not in repr(pg)
    with pytest.raises(ValueError, match="unsupported") as info:
        create_store("mysql://u:secret@db/chat", tmp_path)
    assert "secret" not in str(info.value)


@pytest.mark.asyncio
async def test_postgres_errors_never_show_the_password(pg_url: str) -> None:
    url = pg_url.replace("://", "://nobody:hunter2@").replace(":5432", ":1")  # nothing listens there
    with pytest.raises(StoreError) as info:
        await create_store(url, Path("unused")).open()
    assert "hunter2" not in str(info.value) and "nobody:…@" in str(info.value)
    query = pg_url + "&password=hunter2"
    assert "hunter2" not in repr(create_store(query, Path("unused")))


@pytest.mark.asyncio
async def test_create_store_honours_the_schema_in_the_url(pg_url: str) -> None:
    async with create_store(pg_url, Path("unused")) as store:
        await store.apply([CreateConversation(ALICE, "c1", 1.0)])
    schema = pg_url.rpartition("%3D")[2]
    assert pg.query(pg_url, "SELECT table_schema FROM information_schema.tables WHERE table_name = 'conversations'"
                    " AND table_schema = $1", (schema,)) == [(schema,)]
    assert pg.query(pg_url, "SELECT id FROM conversations") == [("c1",)]


def test_plan_batches_many_conversations_into_few_steps() -> None:
    ops: list[object] = []
    for n in range(1, 21):
        for c in range(50):
            cid = f"c{c}"
            ops += [events_op(cid, range(n, n + 1)),
                    UpsertHistoryItem(ALICE, cid, "visible", item("streaming", "x" * n))]
            if n == 20:
                ops += [AppendHistory(ALICE, cid, "visible", (item("next"),)),
                        AppendHistory(ALICE, cid, "model", (item("next"),))]
    steps = plan(ops)  # type: ignore[arg-type]
    assert [len(rows) for _, rows in steps] == [1000, 1000, 100]


@pytest.mark.asyncio
async def test_commits_never_checkpoint_and_the_wal_stays_bounded(tmp_path: Path) -> None:
    """Checkpoints run beside the commits (their fsync never delays one), often enough that
    the WAL is reused instead of growing with everything ever written."""
    path = tmp_path / "chat.db"
    async with SqliteStore(path, checkpoint_interval=0.05) as store:
        assert await store._run(lambda: store._conn().execute("PRAGMA wal_autocheckpoint").fetchone()[0]) == 0
        await store.apply([CreateConversation(ALICE, "c1", 1.0)])
        big = "x" * 20_000
        for batch in range(100):  # ~2 MB per 10 batches, 20 MB in all
            seqs = range(batch * 10 + 1, batch * 10 + 11)
            frames = tuple(EventRecord("c1", s, "content_chunk", None, big) for s in seqs)
            await store.apply([AppendEvents(ALICE, "c1", frames), PruneEvents(ALICE, "c1", seqs.start)])
            await asyncio.sleep(0.01)
        wal = path.with_name("chat.db-wal").stat().st_size
        assert wal < 8_000_000, wal  # without checkpoints it would hold all 20 MB
        assert [e.seq for e in await store.events_after(ALICE, "c1", 0)] == list(range(991, 1001))
