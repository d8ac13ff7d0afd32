"""The canvas half of the store against a real SQLite file and a real PostgreSQL schema:
artifacts and their versions, memories, custom quick actions, and the upgrade of a SQLite
database made by schema version 1 (PostgreSQL's upgrades: test_store_pg.py)."""

from __future__ import annotations

import dataclasses

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from chat_agent.store import (
    AddArtifactVersion,
    AppendEvents,
    AppendHistory,
    ArtifactRecord,
    ArtifactVersionInfo,
    ArtifactVersionRecord,
    ConstraintError,
    CreateConversation,
    DeleteConversation,
    DeleteMemories,
    DeleteQuickAction,
    EventRecord,
    HistoryItem,
    MemoriesRecord,
    PutQuickAction,
    QuickActionRecord,
    SelectArtifactVersion,
    SetMemories,
    SetTitle,
    SqliteStore,
    StartTurn,
    Store,
    TurnRecord,
    op_scope,
)
from chat_agent.store import sqlite as sqlite_store
from chat_agent.store import reads, schema
from chat_agent.store.writes import plan
from tests.stores import Backend

ALICE, BOB = "alice", "bob"


def version(index: int, content: str = "", source: str = "model") -> ArtifactVersionRecord:
    return ArtifactVersionRecord(
        index, "code", f"Title {index}", "python", content or f"print({index})",
        float(index), source,  # type: ignore[arg-type]
    )


def add(index: int, cid: str = "c1", owner: str = ALICE, artifact_id: str = "a1",
        content: str = "") -> AddArtifactVersion:
    return AddArtifactVersion(owner, cid, artifact_id, version(index, content))


def quick(id: str, owner: str = ALICE, title: str = "Tighten", at: float = 1.0) -> QuickActionRecord:
    return QuickActionRecord(id, owner, title, "Make it tighter.", True, False, True, at, at)


def memories(*rules: str, at: float = 1.0) -> MemoriesRecord:
    return MemoriesRecord(list(rules), ["Works on a novel about Lyon."], at)


def event(cid: str, seq: int) -> EventRecord:
    return EventRecord(cid, seq, "artifact", "t1", f'{{"type":"artifact","seq":{seq}}}')


@pytest_asyncio.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    async with backend.new() as opened:
        await opened.apply([CreateConversation(ALICE, "c1", created_at=1.0)])
        yield opened


@pytest.mark.asyncio
async def test_first_version_creates_the_artifact_and_each_new_one_is_current(
    store: Store, backend: Backend,
) -> None:
    assert await store.get_artifact(ALICE, "c1") is None
    await store.apply([add(1)])
    assert await store.get_artifact(ALICE, "c1") == ArtifactRecord("a1", "c1", 1, 1, version(1))
    text = ArtifactVersionRecord(2, "text", "Poem", None, "Roses…\n", 2.0, "user")
    await store.apply([AddArtifactVersion(ALICE, "c1", "a1", text), add(3)])
    assert await store.get_artifact(ALICE, "c1") == ArtifactRecord("a1", "c1", 3, 3, version(3))
    assert await store.get_artifact_version(ALICE, "c1", 2) == text
    assert await store.get_artifact_version(ALICE, "c1", 1) == version(1)
    for missing in (0, 4, -1):
        assert await store.get_artifact_version(ALICE, "c1", missing) is None


@pytest.mark.asyncio
async def test_versions_are_listed_without_their_content_to_their_owner_only(store: Store, backend: Backend) -> None:
    assert await store.list_artifact_versions(ALICE, "c1") == []
    await store.apply([add(1), AddArtifactVersion(ALICE, "c1", "a1", version(2, source="user")), add(3)])
    assert await store.list_artifact_versions(ALICE, "c1") == [
        ArtifactVersionInfo(1, "Title 1", 1.0, "model"), ArtifactVersionInfo(2, "Title 2", 2.0, "user"),
        ArtifactVersionInfo(3, "Title 3", 3.0, "model")]
    assert await store.list_artifact_versions(BOB, "c1") == []
    assert await store.list_artifact_versions(ALICE, "nope") == []


@pytest.mark.asyncio
async def test_select_moves_current_and_the_next_version_is_appended_last(
    store: Store, backend: Backend,
) -> None:
    await store.apply([add(1), add(2), add(3)])
    await store.apply([SelectArtifactVersion(ALICE, "c1", 1)])
    assert await store.get_artifact(ALICE, "c1") == ArtifactRecord("a1", "c1", 1, 3, version(1))
    # Changing an old version makes a new last version, never a branch.
    await store.apply([add(4)])
    assert await store.get_artifact(ALICE, "c1") == ArtifactRecord("a1", "c1", 4, 4, version(4))
    for bad in (0, 5, -1):
        with pytest.raises(ConstraintError):
            await store.apply([SelectArtifactVersion(ALICE, "c1", bad)])
    assert (await store.get_artifact(ALICE, "c1")).current_index == 4  # type: ignore[union-attr]


@pytest.mark.asyncio
async def test_version_index_rules(store: Store, backend: Backend) -> None:
    with pytest.raises(ConstraintError, match="version_count"):
        await store.apply([add(2)])  # the first version is 1
    assert await store.get_artifact(ALICE, "c1") is None  # not even an empty artifact
    await store.apply([add(1)])
    for wrong in (1, 3, 0):  # a repeat, a gap, nonsense
        with pytest.raises(ConstraintError):
            await store.apply([add(wrong)])
    with pytest.raises(ConstraintError, match="id"):
        await store.apply([add(2, artifact_id="other")])  # one artifact per conversation
    bad_type = ArtifactVersionRecord(2, "html", "t", None, "x", 1.0, "model")  # type: ignore[arg-type]
    bad_source = ArtifactVersionRecord(2, "text", "t", None, "x", 1.0, "bot")  # type: ignore[arg-type]
    for bad in (bad_type, bad_source):
        with pytest.raises(ConstraintError):
            await store.apply([AddArtifactVersion(ALICE, "c1", "a1", bad)])
    assert await store.get_artifact(ALICE, "c1") == ArtifactRecord("a1", "c1", 1, 1, version(1))
    await store.apply([add(2)])  # still usable, still counting from the right place
    assert (await store.get_artifact(ALICE, "c1")).version_count == 2  # type: ignore[union-attr]


@pytest.mark.asyncio
async def test_selecting_without_an_artifact_is_a_no_op(store: Store, backend: Backend) -> None:
    await store.apply([SelectArtifactVersion(ALICE, "c1", 1)])
    assert await store.get_artifact(ALICE, "c1") is None


@pytest.mark.asyncio
async def test_large_versions_are_stored_once_and_read_one_at_a_time(
    store: Store, backend: Backend,
) -> None:
    big = ["é" * 200_000 + str(n) for n in range(1, 6)]
    for n, content in enumerate(big, 1):
        await store.apply([add(n, content=content)])
    artifact = await store.get_artifact(ALICE, "c1")
    assert artifact is not None and artifact.current.content == big[-1]
    assert (await store.get_artifact_version(ALICE, "c1", 2)).content == big[1]  # type: ignore[union-attr]
    stored = backend.sql("SELECT SUM(LENGTH(content)) FROM artifact_versions")[0][0]
    assert stored == sum(len(c) for c in big)  # each version once, nothing re-encoded
    if backend.name == "sqlite":
        # The current version is found by its key, not by scanning the versions.
        steps = [row[-1] for row in backend.sql(f"EXPLAIN QUERY PLAN {reads.ARTIFACT}", ("c1", ALICE))]
        assert not [s for s in steps if s.startswith("SCAN")], steps


@pytest.mark.asyncio
async def test_another_owner_sees_no_artifact_and_changes_nothing(store: Store, backend: Backend) -> None:
    await store.apply([add(1), add(2)])
    before = await store.get_artifact(ALICE, "c1")
    assert await store.get_artifact(BOB, "c1") is None
    assert await store.get_artifact_version(BOB, "c1", 1) is None
    await store.apply([
        add(3, owner=BOB),
        add(1, owner=BOB, artifact_id="bobs"),
        SelectArtifactVersion(BOB, "c1", 1),
        SelectArtifactVersion(BOB, "c1", 99),  # not even checked: not his conversation
    ])
    assert await store.get_artifact(ALICE, "c1") == before
    assert await store.get_artifact_version(ALICE, "c1", 3) is None


@pytest.mark.asyncio
async def test_artifact_ops_on_a_missing_conversation_are_no_ops(store: Store, backend: Backend) -> None:
    await store.apply([add(1, cid="gone"), add(5, cid="gone"),
                       SelectArtifactVersion(ALICE, "gone", 7)])
    assert await store.get_artifact(ALICE, "gone") is None
    assert backend.count("artifacts") == backend.count("artifact_versions") == 0


@pytest.mark.asyncio
async def test_deleting_a_conversation_deletes_its_artifact(store: Store, backend: Backend) -> None:
    await store.apply([CreateConversation(ALICE, "c2", 1.0), add(1), add(2), add(1, cid="c2")])
    await store.apply([DeleteConversation(ALICE, "c1")])
    assert await store.get_artifact(ALICE, "c1") is None
    assert backend.count("artifacts") == backend.count("artifact_versions") == 1
    # The same id starts without an artifact, and its first version is 1 again.
    await store.apply([CreateConversation(ALICE, "c1", 2.0), add(1, artifact_id="new")])
    assert await store.get_artifact(ALICE, "c1") == ArtifactRecord("new", "c1", 1, 1, version(1))


@pytest.mark.asyncio
async def test_memories_are_per_owner(store: Store, backend: Backend) -> None:
    assert await store.get_memories(ALICE) is None
    await store.apply([SetMemories(ALICE, memories("No emojis.", "Short sentences.")),
                       SetMemories(BOB, memories("Écrire en français.", at=2.0))])
    assert await store.get_memories(ALICE) == memories("No emojis.", "Short sentences.")
    assert await store.get_memories(BOB) == memories("Écrire en français.", at=2.0)
    await store.apply([SetMemories(ALICE, MemoriesRecord([], [], 3.0))])  # replaced whole
    assert await store.get_memories(ALICE) == MemoriesRecord([], [], 3.0)
    await store.apply([DeleteMemories(ALICE), DeleteMemories("nobody")])
    assert await store.get_memories(ALICE) is None
    assert await store.get_memories(BOB) == memories("Écrire en français.", at=2.0)
    # Memories outlive conversations: deleting one does not touch them.
    await store.apply([SetMemories(ALICE, memories("a")), DeleteConversation(ALICE, "c1")])
    assert await store.get_memories(ALICE) == memories("a")


@pytest.mark.asyncio
async def test_memories_change_by_compare_and_set(store: Store, backend: Backend) -> None:
    first = await store.swap_memories(ALICE, memories("a"), None)
    assert first == memories("a") and first is not None and first.version
    assert await store.swap_memories(ALICE, memories("b"), None) is None  # some are stored already
    stored = await store.get_memories(ALICE)
    assert stored == memories("a") and stored is not None and stored.version == first.version
    second = await store.swap_memories(ALICE, memories("b", at=2.0), first.version)
    assert second is not None and second.version not in (None, first.version)
    assert await store.swap_memories(ALICE, memories("c"), first.version) is None  # stale: written since
    assert await store.get_memories(ALICE) == memories("b", at=2.0)
    # An unconditional write and a delete make every version read before them stale too.
    await store.apply([SetMemories(ALICE, memories("d"))])
    assert await store.swap_memories(ALICE, memories("e"), second.version) is None
    third = await store.get_memories(ALICE)
    assert third is not None and third.version not in (first.version, second.version)
    await store.apply([DeleteMemories(ALICE)])
    assert await store.swap_memories(ALICE, memories("e"), third.version) is None
    assert await store.swap_memories(ALICE, memories("e"), None) == memories("e")
    assert await store.get_memories(BOB) is None  # per owner


@pytest.mark.asyncio
async def test_concurrent_compare_and_sets_lose_no_update(store: Store, backend: Backend) -> None:
    """Two stores on one database (two instances), each counting up 15 times by
    compare-and-set, interleaved: every increment is kept."""
    async def count_up(on: Store) -> int:
        conflicts = 0
        for _ in range(15):
            while True:
                current = await on.get_memories(ALICE)
                n = int(current.content[0]) if current is not None else 0
                if await on.swap_memories(ALICE, MemoriesRecord([], [str(n + 1)], 1.0),
                                          current.version if current is not None else None):
                    break
                conflicts += 1
        return conflicts

    async with backend.new() as other:
        await asyncio.gather(count_up(store), count_up(other), count_up(store))
    final = await store.get_memories(ALICE)
    assert final is not None and final.content == ["45"]


@pytest.mark.asyncio
async def test_quick_actions_round_trip_oldest_first(store: Store, backend: Backend) -> None:
    await store.apply([PutQuickAction(quick("q2", at=2.0)), PutQuickAction(quick("q1", at=1.0)),
                       PutQuickAction(quick("qb", owner=BOB, at=0.5))])
    assert [q.id for q in await store.list_quick_actions(ALICE)] == ["q1", "q2"]
    assert await store.get_quick_action(ALICE, "q1") == quick("q1", at=1.0)
    # A replace keeps the quick action's place: created_at is the stored one.
    edited = QuickActionRecord("q1", ALICE, "Loosen", "Looser.", False, True, False, 9.0, 9.0)
    await store.apply([PutQuickAction(edited)])
    got = await store.get_quick_action(ALICE, "q1")
    assert got == QuickActionRecord("q1", ALICE, "Loosen", "Looser.", False, True, False, 1.0, 9.0)
    assert [q.id for q in await store.list_quick_actions(ALICE)] == ["q1", "q2"]
    await store.apply([DeleteQuickAction(ALICE, "q1"), DeleteQuickAction(ALICE, "missing")])
    assert [q.id for q in await store.list_quick_actions(ALICE)] == ["q2"]
    assert await store.get_quick_action(ALICE, "q1") is None


@pytest.mark.asyncio
async def test_a_quick_action_belongs_to_its_owner(store: Store, backend: Backend) -> None:
    await store.apply([PutQuickAction(quick("q1"))])
    assert await store.get_quick_action(BOB, "q1") is None
    assert await store.list_quick_actions(BOB) == []
    with pytest.raises(ConstraintError, match="another owner"):
        await store.apply([PutQuickAction(quick("q1", owner=BOB, title="Taken over"))])
    await store.apply([DeleteQuickAction(BOB, "q1")])
    assert await store.get_quick_action(ALICE, "q1") == quick("q1")


@pytest.mark.asyncio
async def test_a_failing_mixed_batch_leaves_nothing_behind(store: Store, backend: Backend) -> None:
    await store.apply([add(1), SetMemories(ALICE, memories("old")), PutQuickAction(quick("q1"))])
    before = await _snapshot(store)
    with pytest.raises(ConstraintError):
        await store.apply([
            CreateConversation(ALICE, "c2", 2.0),
            add(1, cid="c2"),
            AppendEvents(ALICE, "c1", (event("c1", 1),), 3.0),
            SetTitle(ALICE, "c1", "changed"),
            add(2),
            SelectArtifactVersion(ALICE, "c1", 1),
            SetMemories(ALICE, memories("new")),
            DeleteMemories(ALICE),
            PutQuickAction(quick("q1", title="changed")),
            PutQuickAction(quick("q2")),
            DeleteQuickAction(ALICE, "q1"),
            add(2),  # version 2 was just added by this batch
        ])
    assert await _snapshot(store) == before
    assert await store.get_conversation(ALICE, "c2") is None


@pytest.mark.asyncio
async def test_a_mixed_batch_keeps_each_scopes_order(store: Store, backend: Backend) -> None:
    ops = [CreateConversation(ALICE, "c2", 1.0)]
    for n in range(1, 4):
        for cid in ("c1", "c2"):
            ops += [add(n, cid=cid), AppendEvents(ALICE, cid, (event(cid, n),), 2.0)]
        ops += [SetMemories(ALICE, memories(f"rule {n}")), PutQuickAction(quick("q", title=f"v{n}"))]
    ops += [DeleteMemories(BOB), DeleteQuickAction(ALICE, "q"),
            PutQuickAction(quick("q", title="again", at=7.0)),
            # c2's new artifact must come after the delete, though c1's step could take it.
            add(4, cid="c1"), DeleteConversation(ALICE, "c2"), CreateConversation(ALICE, "c2", 3.0),
            add(1, cid="c2", artifact_id="fresh"), add(2, cid="c2", artifact_id="fresh"),
            SelectArtifactVersion(ALICE, "c1", 2)]
    await store.apply(ops)
    assert await store.get_artifact(ALICE, "c1") == ArtifactRecord("a1", "c1", 2, 4, version(2))
    assert await store.get_artifact(ALICE, "c2") == ArtifactRecord("fresh", "c2", 2, 2, version(2))
    assert await store.get_memories(ALICE) == memories("rule 3")
    assert await store.list_quick_actions(ALICE) == [quick("q", title="again", at=7.0)]
    assert [e.seq for e in await store.events_after(ALICE, "c1", 0)] == [1, 2, 3]


def test_plan_batches_many_conversations_artifact_versions() -> None:
    ops = [add(1, cid=f"c{c}") for c in range(50)] + [add(2, cid=f"c{c}") for c in range(50)]
    ops += [SetMemories(f"u{n}", memories()) for n in range(50)]
    # The artifact row and the version for version 1, again for version 2, then memories.
    assert [len(rows) for _, rows in plan(ops)] == [50, 50, 50, 50, 50]


def test_op_scope_names_what_an_op_belongs_to() -> None:
    assert op_scope(add(1, cid="c9")) == "c9"
    assert op_scope(SelectArtifactVersion(ALICE, "c9", 1)) == "c9"
    assert op_scope(StartTurn(TurnRecord("t", "c9", ALICE, "m", "running", 1.0, 1))) == "c9"
    assert op_scope(SetMemories(ALICE, memories())) == op_scope(DeleteMemories(ALICE))
    assert op_scope(SetMemories(ALICE, memories())) != op_scope(SetMemories(BOB, memories()))
    assert op_scope(PutQuickAction(quick("q", owner=BOB))) == op_scope(DeleteQuickAction(ALICE, "q"))


@pytest.mark.asyncio
async def test_a_version_1_database_upgrades_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    with monkeypatch.context() as old:  # this build as it was before the canvas migration
        old.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:1])
        old.setattr(schema, "SCHEMA_VERSION", 1)
        old.setattr(sqlite_store, "_ANY_PENDING", "SELECT 1 WHERE 0")  # nor its search index's queue
        # its reads, too, knew no column of a later migration
        old.setattr(reads, "CONVERSATION", "SELECT id, owner, title, created_at, updated_at, last_seq FROM conversations")
        async with SqliteStore(path) as store:
            await store.apply([
                CreateConversation(ALICE, "c1", 1.0),
                SetTitle(ALICE, "c1", "Before"),
                AppendEvents(ALICE, "c1", (event("c1", 1), event("c1", 2)), 2.0),
            ])
            kept = await _conversation_and_events(store)
    with sqlite3.connect(path) as db:
        assert "artifacts" not in {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        # a history item as that build wrote it (its writes knew no column of a later migration)
        db.execute("INSERT INTO history_items (conversation_id, history, pos, id, data, tokens, chars)"
                   " VALUES ('c1', 'visible', 0, 'h', '{\"x\": 1}', 1, 1)")

    async with SqliteStore(path) as store:
        conversation, events = await _conversation_and_events(store)
        assert (conversation, events) == (dataclasses.replace(kept[0], leaf_id="h"), kept[1])  # type: ignore[type-var]
        assert [i.id for i in await store.load_history(ALICE, "c1", "visible")] == ["h"]
        await store.apply([add(1), add(2), SetMemories(ALICE, memories("kept")),
                           PutQuickAction(quick("q1"))])
        assert await store.get_artifact(ALICE, "c1") == ArtifactRecord("a1", "c1", 2, 2, version(2))
        # The old conversation cascades into the new tables like a new one would.
        await store.apply([DeleteConversation(ALICE, "c1")])
        assert _count(path, "artifact_versions") == 0
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version FROM schema_version").fetchall() == [
            (n,) for n in range(1, schema.SCHEMA_VERSION + 1)]
    async with SqliteStore(path) as store:  # a second open migrates nothing
        assert await store.get_memories(ALICE) == memories("kept")
        assert [q.id for q in await store.list_quick_actions(ALICE)] == ["q1"]


async def _conversation_and_events(store: Store) -> tuple[object, ...]:
    return await store.get_conversation(ALICE, "c1"), await store.events_after(ALICE, "c1", 0)


async def _snapshot(store: Store) -> tuple[object, ...]:
    return (
        await store.list_conversations(ALICE),
        await store.events_after(ALICE, "c1", 0),
        await store.get_artifact(ALICE, "c1"),
        await store.get_artifact_version(ALICE, "c1", 2),
        await store.get_memories(ALICE),
        await store.list_quick_actions(ALICE),
    )


def _count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as db:
        return db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
