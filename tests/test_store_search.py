"""The search index follows every way a message or a title is written, changed or removed,
in one batch or across several, on both stores; on SQLite the full-text index stays exactly
the documents' text (FTS5's integrity check) and nothing is left waiting to be indexed; on
PostgreSQL a document is indexed after its commit and found before that all the same."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from chat_agent.store import (AppendHistory, CreateConversation, DeleteConversation, DeleteHistoryItems,
                              HistoryItem, ReplaceHistory, SetTitle, SqliteStore, UpsertHistoryItem)
from chat_agent.store import schema
from chat_agent.store import sqlite as sqlite_store
from tests import pg
from tests.stores import Backend, backend  # noqa: F401

pytestmark = pytest.mark.asyncio
ALICE = "alice"
IDLE_INDEXER = {"index_every": 3600.0}  # the store's own indexer stays out of what a test counts


def message(id: str, text: str, role: str = "user", parent: str | None = None) -> HistoryItem:
    data = {"id": id, "role": role, "createdAt": 1.0, "status": "complete", "parts": [{"type": "text", "text": text}]}
    return HistoryItem(id, data, 1, len(text), parent_id=parent)


async def found(store, *terms: str) -> list[tuple[str, str | None]]:
    return [(hit.record.id, hit.message_id) for hit in await store.search_conversations(ALICE, terms, 50)]


async def check_index(backend: Backend, store) -> None:
    """SQLite: nothing waits and FTS5 holds exactly the documents' text. PostgreSQL: what the
    commits wrote waits for the indexer (the searches before this found it all the same), and
    once indexed every document's tsvector is that of its text."""
    if backend.name == "sqlite":
        assert backend.count("search_pending") == 0
        backend.sql("INSERT INTO search_fts (search_fts, rank) VALUES ('integrity-check', 1)")  # raises if it drifted
        return
    waiting = backend.sql("SELECT COUNT(*) FROM search_docs WHERE tsv IS NULL")[0][0]
    assert await store.index_search_documents() == waiting
    assert backend.sql("SELECT COUNT(*) FROM search_docs WHERE tsv IS NULL"
                       " OR tsv <> to_tsvector('simple', body)")[0][0] == 0


async def test_every_write_is_found_and_the_index_stays_exact(backend: Backend) -> None:
    async with backend.new(**IDLE_INDEXER) as store:
        await store.apply([CreateConversation(ALICE, "c1", 1.0), CreateConversation(ALICE, "c2", 1.0)])
        await store.apply([AppendHistory(ALICE, "c1", "visible", (message("u1", "quartz harbour lantern"),
                                                                  message("a1", "violet engine", "assistant", "u1")))])
        assert await found(store, "harbour") == [("c1", "u1")]
        assert await found(store, "violet", "engine") == [("c1", "a1")]
        await check_index(backend, store)

        # written and changed in one batch: only the last text is indexed
        await store.apply([AppendHistory(ALICE, "c2", "visible", (message("u2", "first draft walrus"),)),
                           UpsertHistoryItem(ALICE, "c2", "visible", message("u2", "final copy narwhal"))])
        assert await found(store, "walrus") == [] and await found(store, "narwhal") == [("c2", "u2")]
        await check_index(backend, store)
        # changed in a later batch: the old words leave the index
        await store.apply([UpsertHistoryItem(ALICE, "c1", "visible", message("a1", "crimson turbine", "assistant",
                                                                              "u1"))])
        assert await found(store, "violet") == [] and await found(store, "crimson") == [("c1", "a1")]
        await check_index(backend, store)

        # written and removed in one batch, and removed in a later one
        await store.apply([AppendHistory(ALICE, "c2", "visible", (message("a2", "fleeting comet", "assistant",
                                                                          "u2"),)),
                           DeleteHistoryItems(ALICE, "c2", "visible", ("a2",))])
        assert await found(store, "comet") == []
        await store.apply([DeleteHistoryItems(ALICE, "c1", "visible", ("u1",))])
        assert await found(store, "quartz") == [] and await found(store, "crimson") == [("c1", "a1")]
        await check_index(backend, store)

        # titles, a replaced history, a deleted conversation
        await store.apply([SetTitle(ALICE, "c1", "Saffron notes")])
        assert await found(store, "saffron") == [("c1", None)]
        await store.apply([ReplaceHistory(ALICE, "c2", "visible", (message("u9", "orchid summary"),))])
        assert await found(store, "narwhal") == [] and await found(store, "orchid") == [("c2", "u9")]
        await check_index(backend, store)
        await store.apply([DeleteConversation(ALICE, "c1")])
        assert await found(store, "saffron") == [] and await found(store, "crimson") == []
        await check_index(backend, store)


async def test_a_version_13_database_keeps_its_index_and_indexes_on(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "old.db"
    with monkeypatch.context() as old:  # this build before search documents were indexed per batch
        old.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:13])
        old.setattr(schema, "SCHEMA_VERSION", 13)
        old.setattr(sqlite_store, "_ANY_PENDING", "SELECT 1 WHERE 0")
        async with SqliteStore(path) as store:
            await store.apply([CreateConversation(ALICE, "c1", 1.0), SetTitle(ALICE, "c1", "Amber")])
            await store.apply([AppendHistory(ALICE, "c1", "visible", (message("u1", "indexed before"),))])
    async with SqliteStore(path) as store:
        assert await found(store, "indexed") == [("c1", "u1")] and await found(store, "amber") == [("c1", None)]
        await store.apply([UpsertHistoryItem(ALICE, "c1", "visible", message("u1", "indexed after")),
                           AppendHistory(ALICE, "c1", "visible", (message("a1", "newly written", "assistant", "u1"),))])
        assert await found(store, "before") == [] and await found(store, "after") == [("c1", "u1")]
        assert await found(store, "newly") == [("c1", "a1")]
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT MAX(version) FROM schema_version").fetchone() == (schema.SCHEMA_VERSION,)
        assert db.execute("SELECT COUNT(*) FROM search_pending").fetchone() == (0,)
        db.execute("INSERT INTO search_fts (search_fts, rank) VALUES ('integrity-check', 1)")


@pytest.fixture
def postgres() -> Iterator[Backend]:
    with pg.isolated_database() as url:
        yield Backend("postgres", url)


async def test_postgres_indexes_a_message_after_its_commit_and_finds_it_before(postgres: Backend) -> None:
    backend = postgres
    async with backend.new(**IDLE_INDEXER) as store:
        await store.apply([CreateConversation(ALICE, "c1", 1.0),
                           AppendHistory(ALICE, "c1", "visible", (message("u1", "amber falcon"),))])
        # the commit wrote the text, not its tsvector; a search reads the text meanwhile
        assert backend.sql("SELECT tsv IS NULL FROM search_docs WHERE message_id = 'u1'") == [(True,)]
        assert await found(store, "falcon") == [("c1", "u1")]
        await store.index_search_documents()
        assert await found(store, "falcon") == [("c1", "u1")]
        # a change waits again, and only the new words are found
        await store.apply([UpsertHistoryItem(ALICE, "c1", "visible", message("u1", "cobalt heron"))])
        assert backend.sql("SELECT tsv IS NULL FROM search_docs WHERE message_id = 'u1'") == [(True,)]
        assert await found(store, "falcon") == [] and await found(store, "heron") == [("c1", "u1")]
    async with backend.new() as store:  # the store's own indexer takes it within a second or so
        for _ in range(200):
            if backend.sql("SELECT COUNT(*) FROM search_docs WHERE tsv IS NULL")[0][0] == 0:
                break
            await asyncio.sleep(0.05)
        assert backend.sql("SELECT tsv = to_tsvector('simple', body) FROM search_docs WHERE message_id = 'u1'") \
            == [(True,)]
