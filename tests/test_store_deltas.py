"""Artifact versions stored as deltas with periodic snapshots (schema migration 5), against a real
SQLite file and a real PostgreSQL schema: what is written, what is read back, the snapshot cadence, and the upgrade of a
database whose versions were all stored whole."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from chat_agent import edits
from chat_agent.store import (AddArtifactVersion, ArtifactVersionRecord, ConstraintError, CreateConversation,
                              DeleteConversation, SelectArtifactVersion, SqliteStore, Store, VersionDelta)
from chat_agent.store import sqlite as sqlite_store
from chat_agent.store import schema
from chat_agent.store.writes import DELTA_SHARE, MAX_CHAIN
from tests import pace
from tests.stores import Backend

ALICE = "alice"
BIG = "".join(f"Paragraph {n}: the canvas keeps the document beside the chat. é🌱\n" for n in range(4000))


def record(index: int, content: str, title: str = "Doc") -> ArtifactVersionRecord:
    return ArtifactVersionRecord(index, "text", title, None, content, float(index), "model")


def edit(text: str, n: int) -> str:
    """A 10-character edit somewhere in the text, different for each n."""
    at = (n * 7919) % (len(text) - 10)
    return text[:at] + f"<{n:08d}>" + text[at + 10:]


class Versions:
    """Adds versions the way the canvas does: each derives from the current one by a diff."""

    def __init__(self, store: Store, cid: str = "c1"):
        self.store, self.cid = store, cid
        self.contents: list[str] = []
        self.current = 0

    async def add(self, content: str, delta: bool = True) -> None:
        index = len(self.contents) + 1
        base = self.contents[self.current - 1] if self.current else None
        change = (VersionDelta(self.current, tuple(edits.diff(base, content)))
                  if delta and base is not None else None)
        await self.store.apply([AddArtifactVersion(ALICE, self.cid, "a1", record(index, content), change)])
        self.contents.append(content)
        self.current = index

    async def select(self, index: int) -> None:
        await self.store.apply([SelectArtifactVersion(ALICE, self.cid, index)])
        self.current = index


def rows(backend: Backend) -> list[tuple]:
    return backend.sql("SELECT idx, base_idx, LENGTH(content), LENGTH(changes), chain_len FROM artifact_versions"
                       " WHERE conversation_id = 'c1' ORDER BY idx")


@pytest_asyncio.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    async with backend.new() as opened:
        await opened.apply([CreateConversation(ALICE, "c1", created_at=1.0)])
        yield opened


@pytest.mark.asyncio
async def test_small_edits_are_stored_as_small_deltas_and_read_back_whole(store: Store, backend: Backend) -> None:
    versions = Versions(store)
    await versions.add(BIG)
    for n in range(1, 6):
        await versions.add(edit(versions.contents[-1], n))
    stored = rows(backend)
    assert stored[0] == (1, None, len(BIG), None, 0)  # the first version is a snapshot
    for idx, base, content, changes, chain in stored[1:]:
        assert (base, content, chain) == (idx - 1, 0, idx - 1) and changes < 40, stored
    for index, content in enumerate(versions.contents, 1):
        version = await store.get_artifact_version(ALICE, "c1", index)
        assert version is not None and version.content == content and version.index == index
    artifact = await store.get_artifact(ALICE, "c1")
    assert artifact is not None and artifact.current.content == versions.contents[-1]


@pytest.mark.asyncio
async def test_a_snapshot_is_taken_every_max_chain_deltas(store: Store, backend: Backend) -> None:
    versions = Versions(store)
    await versions.add(BIG)
    for n in range(1, 2 * MAX_CHAIN + 6):
        await versions.add(edit(versions.contents[-1], n))
    stored = rows(backend)
    snapshots = [idx for idx, base, *_ in stored if base is None]
    assert snapshots == [1, MAX_CHAIN + 2, 2 * MAX_CHAIN + 3]
    assert max(chain for *_, chain in stored) == MAX_CHAIN  # no read applies more than MAX_CHAIN deltas
    for index in (MAX_CHAIN + 1, MAX_CHAIN + 2, len(versions.contents)):
        assert (await store.get_artifact_version(ALICE, "c1", index)).content == versions.contents[index - 1]  # type: ignore[union-attr]


@pytest.mark.asyncio
async def test_a_snapshot_is_taken_once_the_deltas_outweigh_a_share_of_the_content(store: Store, backend: Backend) -> None:
    versions = Versions(store)
    await versions.add("x" * 1000)
    for n in range(1, 8):  # each delta is 114 characters of JSON: [[100,200,"nnn…"]]
        content = versions.contents[-1]
        await versions.add(content[:100] + f"{n}" * 100 + content[200:])
    sizes = backend.sql("SELECT idx, base_idx IS NULL, chain_size FROM artifact_versions ORDER BY idx")
    # four deltas (456 characters) fit in DELTA_SHARE of 1,000 characters, a fifth would not
    assert DELTA_SHARE == 0.5
    assert sizes == [(1, 1, 0), (2, 0, 114), (3, 0, 228), (4, 0, 342), (5, 0, 456), (6, 1, 0), (7, 0, 114),
                     (8, 0, 228)]
    await versions.add("y" * 1000)  # a rewrite: its one change is as big as the content, stored whole
    assert rows(backend)[-1][:2] == (9, None)
    for index, content in enumerate(versions.contents, 1):
        assert (await store.get_artifact_version(ALICE, "c1", index)).content == content  # type: ignore[union-attr]


@pytest.mark.asyncio
async def test_an_edit_of_an_older_version_chains_through_that_version(store: Store, backend: Backend) -> None:
    versions = Versions(store)
    await versions.add(BIG)
    await versions.add(edit(BIG, 1))
    await versions.add(edit(versions.contents[-1], 2))
    await versions.select(2)
    await versions.add(edit(versions.contents[1], 3))  # version 4, derived from version 2
    assert rows(backend)[-1][:2] == (4, 2)
    assert (await store.get_artifact(ALICE, "c1")).current.content == versions.contents[3]  # type: ignore[union-attr]
    assert (await store.get_artifact_version(ALICE, "c1", 3)).content == versions.contents[2]  # type: ignore[union-attr]


@pytest.mark.asyncio
async def test_a_delta_without_its_base_is_stored_whole_and_a_bad_row_is_refused(store: Store, backend: Backend) -> None:
    versions = Versions(store)
    await versions.add("one two three")
    lost = AddArtifactVersion(ALICE, "c1", "a1", record(2, "one 2 three"), VersionDelta(9, ((4, 7, "2"),)))
    await store.apply([lost])
    assert rows(backend)[-1] == (2, None, len("one 2 three"), None, 0)
    assert (await store.get_artifact_version(ALICE, "c1", 2)).content == "one 2 three"  # type: ignore[union-attr]
    for base, changes in ((3, "[]"), (2, None), (None, "[]"), (0, "[]")):
        with pytest.raises(backend.integrity_error, match="delta"):
            backend.sql("INSERT INTO artifact_versions (conversation_id, idx, type, title, content, created_at,"
                        " source, base_idx, changes) VALUES ('c1', 3, 'text', 't', '', 1, 'user', CAST(? AS BIGINT), ?)",
                        (base, changes))
    with pytest.raises(ConstraintError):  # the version rules of before still hold
        await store.apply([AddArtifactVersion(ALICE, "c1", "a1", record(2, "x"), VersionDelta(1, ()))])


@pytest.mark.asyncio
async def test_reading_any_version_of_a_megabyte_artifact_stays_fast(store: Store, backend: Backend) -> None:
    versions = Versions(store)
    big = (BIG * 4)[:1_000_000]
    await versions.add(big)
    for n in range(1, MAX_CHAIN + 10):
        await versions.add(edit(versions.contents[-1], n))
    stored = backend.sql("SELECT SUM(LENGTH(content) + COALESCE(LENGTH(changes), 0)) FROM artifact_versions")[0][0]
    assert stored < 2 * len(big) + 10_000  # two snapshots and small deltas, not 40 megabytes
    slowest = 0.0
    for index in range(1, len(versions.contents) + 1):
        began = time.perf_counter()
        version = await store.get_artifact_version(ALICE, "c1", index)
        slowest = max(slowest, time.perf_counter() - began)
        assert version is not None and version.content == versions.contents[index - 1]
    assert slowest < pace.scaled(1.0), f"the slowest version read took {slowest:.3f} s"  # ~20 ms at the longest chain


@pytest.mark.asyncio
async def test_a_database_of_whole_versions_upgrades_and_chains_on_from_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    with monkeypatch.context() as old:  # this build as it was before migration 5
        old.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:4])
        old.setattr(schema, "SCHEMA_VERSION", 4)
        old.setattr(sqlite_store, "_ANY_PENDING", "SELECT 1 WHERE 0")  # nor its search index's queue
        async with SqliteStore(path) as store:
            await store.apply([CreateConversation(ALICE, "c1", 1.0)])
    with sqlite3.connect(path) as db:  # versions as that build wrote them: every one whole
        db.execute("INSERT INTO artifacts (conversation_id, id, current_index, version_count) VALUES ('c1', 'a1', 0, 0)")
        for index, content in ((1, BIG), (2, edit(BIG, 1))):
            db.execute("INSERT INTO artifact_versions (conversation_id, idx, type, title, language, content,"
                       " created_at, source) VALUES ('c1', ?, 'text', 'Doc', NULL, ?, ?, 'model')",
                       (index, content, float(index)))
        assert "base_idx" not in {r[1] for r in db.execute("PRAGMA table_info(artifact_versions)")}

    backend = Backend("sqlite", path)
    async with SqliteStore(path) as store:
        assert (await store.get_artifact(ALICE, "c1")).current.content == edit(BIG, 1)  # type: ignore[union-attr]
        versions = Versions(store)
        versions.contents, versions.current = [BIG, edit(BIG, 1)], 2
        await versions.add(edit(versions.contents[-1], 2))
        assert rows(backend) == [(1, None, len(BIG), None, 0), (2, None, len(BIG), None, 0),
                               (3, 2, 0, rows(backend)[2][3], 1)]
        for index, content in enumerate(versions.contents, 1):
            assert (await store.get_artifact_version(ALICE, "c1", index)).content == content  # type: ignore[union-attr]
        await store.apply([DeleteConversation(ALICE, "c1")])  # deltas cascade like the rest
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM artifact_versions").fetchone() == (0,)
        assert db.execute("SELECT MAX(version) FROM schema_version").fetchone() == (schema.SCHEMA_VERSION,)
