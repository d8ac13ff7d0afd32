"""What only PostgreSQL has: its migrations (from an empty schema and from every older version,
several instances starting at once), and the fence's lock that holds a takeover back until a
fenced batch is committed."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from chat_agent.store import (AddArtifactVersion, AppendEvents, ArtifactVersionRecord, CreateConversation,
                              EventRecord, MemoriesRecord, PostgresStore, VersionDelta, schema)
from chat_agent.store import pg_schema
from tests import pg

OWNER = "u"


def versions(url: str) -> list[int]:
    return [v for (v,) in pg.query(url, "SELECT version FROM schema_version ORDER BY version")]


def tables(url: str) -> set[str]:
    return {t for (t,) in pg.query(url, "SELECT table_name FROM information_schema.tables WHERE table_schema ="
                                        " current_schema()")}


def test_both_backends_are_at_the_same_version() -> None:
    assert pg_schema.SCHEMA_VERSION == schema.SCHEMA_VERSION == len(pg_schema.MIGRATIONS)


async def test_an_empty_schema_is_migrated_to_the_latest(pg_url: str) -> None:
    assert tables(pg_url) == set()
    async with PostgresStore(pg_url):
        pass
    assert versions(pg_url) == list(range(1, pg_schema.SCHEMA_VERSION + 1))
    assert {"conversations", "events", "artifacts", "files", "leases"} <= tables(pg_url)
    async with PostgresStore(pg_url):  # a second open migrates nothing
        pass
    assert versions(pg_url) == list(range(1, pg_schema.SCHEMA_VERSION + 1))


async def _migrate(url: str, upto: int) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await pg_schema.migrate(conn, upto)


@pytest.mark.parametrize("old", range(1, pg_schema.SCHEMA_VERSION))
async def test_every_older_version_upgrades_in_place(pg_url: str, old: int) -> None:
    await _migrate(pg_url, old)
    assert versions(pg_url) == list(range(1, old + 1))
    # rows as that build wrote them
    pg.query(pg_url, "INSERT INTO conversations (id, owner, title, created_at, updated_at) VALUES"
                     " ('c1', $1, 'Before', 1, 1)", (OWNER,))
    pg.query(pg_url, "INSERT INTO events (conversation_id, seq, type, frame, stored_at) VALUES"
                     " ('c1', 1, 'pong', '{\"seq\":1}', 2)")
    if old >= 2:
        pg.query(pg_url, "INSERT INTO artifacts (conversation_id, id, current_index, version_count)"
                         " VALUES ('c1', 'a1', 0, 0)")
        pg.query(pg_url, "INSERT INTO artifact_versions (conversation_id, idx, type, title, content, created_at,"
                         " source) VALUES ('c1', 1, 'text', 'Doc', 'one two three', 1, 'model')")
        pg.query(pg_url, "INSERT INTO memories (owner, style_rules, content, updated_at)"
                         " VALUES ($1, '[]', '[\"Old fact.\"]', 1)", (OWNER,))
    if old >= 11:  # a title set by that build: its search document, indexed in its commit then
        pg.query(pg_url, "UPDATE conversations SET title = 'Before' WHERE id = 'c1'")

    async with PostgresStore(pg_url) as store:
        assert versions(pg_url) == list(range(1, pg_schema.SCHEMA_VERSION + 1))
        conv = await store.get_conversation(OWNER, "c1")
        assert conv is not None and (conv.title, conv.last_seq, conv.context_overhead) == ("Before", 1, 0)
        assert [e.frame for e in await store.events_after(OWNER, "c1", 0)] == ['{"seq":1}']
        await store.apply([AppendEvents(OWNER, "c1", (EventRecord("c1", 2, "pong", None, "{}"),), 3.0)])
        assert (await store.get_conversation(OWNER, "c1")).last_seq == 2  # type: ignore[union-attr]  # the trigger
        index = 1
        if old < 2:
            await store.apply([AddArtifactVersion(OWNER, "c1", "a1", ArtifactVersionRecord(
                1, "text", "Doc", None, "one two three", 1.0, "model"))])
        await store.apply([AddArtifactVersion(OWNER, "c1", "a1", ArtifactVersionRecord(
            index + 1, "text", "Doc", None, "one 2 three", 2.0, "user"), VersionDelta(index, ((4, 7, "2"),)))])
        assert (await store.get_artifact(OWNER, "c1")).current.content == "one 2 three"  # type: ignore[union-attr]
        assert (await store.claim_lease("c1", "me", 30)) is not None
        # a document indexed before version 15 keeps its tsvector (and is found through it)
        assert pg.query(pg_url, "SELECT tsv IS NOT NULL FROM search_docs WHERE conversation_id = 'c1'") == [(True,)]
        assert [hit.record.id for hit in await store.search_conversations(OWNER, ["before"], 10)] == ["c1"]
        if old >= 2:  # memories written before they had a version: compare-and-set over the empty one
            stored = await store.get_memories(OWNER)
            assert stored is not None and stored.version == "" and stored.content == ["Old fact."]
            assert await store.swap_memories(OWNER, MemoriesRecord([], ["New fact."], 2.0), "") is not None


async def test_instances_starting_together_migrate_once(pg_url: str) -> None:
    stores = [PostgresStore(pg_url, min_size=1) for _ in range(4)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        assert versions(pg_url) == list(range(1, pg_schema.SCHEMA_VERSION + 1))
        await stores[0].apply([CreateConversation(OWNER, "c1", 1.0)])
        assert all([await s.get_conversation(OWNER, "c1") for s in stores])
    finally:
        await asyncio.gather(*(s.close() for s in stores))


async def test_migrations_wait_for_the_lock(pg_url: str) -> None:
    """While another holds the migration lock of this schema, opening waits for it."""
    holder = await psycopg.AsyncConnection.connect(pg_url)
    try:
        await holder.execute("SELECT pg_advisory_xact_lock(hashtext('chat-agent schema'),"
                             " hashtext(COALESCE(current_schema(), '')))")
        opening = asyncio.create_task(PostgresStore(pg_url).open())
        await asyncio.sleep(0.5)
        assert not opening.done() and tables(pg_url) == set()
        await holder.commit()
        await asyncio.wait_for(opening, 30)
        assert versions(pg_url)[-1] == pg_schema.SCHEMA_VERSION
    finally:
        await holder.close()


async def test_a_takeover_waits_for_a_fenced_batch_in_flight(pg_url: str) -> None:
    """The fence check share-locks the lease: a claim that would take the conversation over
    waits until the batch is committed, so no write of the old holder lands after it."""
    async with PostgresStore(pg_url) as store:
        lease = await store.claim_lease("c1", "a", 30)
        assert lease is not None
        pg.query(pg_url, "UPDATE leases SET expires_at = 0")
        batch = await psycopg.AsyncConnection.connect(pg_url)
        try:
            await batch.execute("SELECT check_fences(%s, %s, %s)", (["c1"], ["a"], [lease.epoch]))
            claim = asyncio.create_task(store.claim_lease("c1", "b", 30))
            await asyncio.sleep(0.5)
            assert not claim.done()  # held back by the batch's lock
            await batch.commit()
            taken = await asyncio.wait_for(claim, 10)
            assert taken is not None and (taken.instance, taken.epoch) == ("b", lease.epoch + 1)
        finally:
            await batch.close()
