"""`PostgresStore`: the backend for several instances, on psycopg 3 with a connection pool.

The statements are SQLite's own (writes.py, reads.py, leases.py), placeholders aside
(dialect.py), sent through psycopg's raw cursor; only the insert of events, most of every
batch, has a set-based form of its own here. A batch is one pipeline: BEGIN, the fence
check, every step's `executemany`, COMMIT go out together and cost one round trip, however
many conversations the group-commit writer gathered. Connections run in autocommit, so a
read is one round trip too; the few reads made of two statements run in one snapshot.
"""

from __future__ import annotations

import dataclasses
import logging
import json
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncConnection, AsyncRawCursor
from psycopg.types.array import ListBinaryDumper
from psycopg.types.numeric import Int8BinaryDumper, Int8Dumper
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from chat_agent.store import leases, reads, writes
from chat_agent.store import tree_reads as trees
from chat_agent.store.base import ConstraintError, Fences, FencedOut, Store, StoreError, StoreUnavailable
from chat_agent.store.dialect import to_postgres
from chat_agent.store.ops import Op
from chat_agent.store.pg_pool import borrow
from chat_agent.store.pg_schema import CHECK_FENCES, FENCED, migrate
from chat_agent.store import pg_search_index
from chat_agent.store.pg_search_index import SearchIndexer
from chat_agent.store.records import (
    ArtifactRecord,
    ArtifactVersionInfo,
    ArtifactVersionRecord,
    ConversationRecord,
    EventRecord,
    FileRecord,
    History,
    HistoryItem,
    HistoryPage,
    HistorySize,
    Lease,
    LiveView,
    MemoriesRecord,
    QuickActionRecord,
    SearchHit,
    TurnRecord,
)

_Connection = AsyncConnection[Any]
T = TypeVar("T")
log = logging.getLogger(__name__)

# Only numbers are summed: usage may also hold nested objects or flags.
_USAGE = (
    "SELECT u.key, SUM(CAST(u.value AS NUMERIC)) FROM turns t, jsonb_each(CAST(t.usage AS JSONB)) u"
    " WHERE t.conversation_id = $1 AND t.owner = $2 AND t.status <> 'running'"
    " AND t.usage IS NOT NULL AND jsonb_typeof(u.value) = 'number' GROUP BY u.key"
)
_TOKENS_SINCE = (
    "SELECT COALESCE(SUM(CAST(u.value AS NUMERIC)), 0) FROM turns t, jsonb_each(CAST(t.usage AS JSONB)) u"
    " WHERE t.owner = $1 AND t.ended_at >= $2 AND t.usage IS NOT NULL"
    " AND jsonb_typeof(u.value) = 'number' AND u.key LIKE '%Tokens'"
)
_RUNNING_OF = "SELECT COUNT(*) FROM turns WHERE owner = $1 AND status = 'running'"
_CONVERSATION_FILES = (
    f"SELECT {reads.FILE_COLUMNS} FROM conversation_files l"
    " JOIN conversations c ON c.id = l.conversation_id JOIN files f ON f.id = l.file_id"
    " WHERE c.id = $1 AND c.owner = $2 AND f.owner = c.owner ORDER BY l.added_at, l.n"
)
_CLAIM = leases.for_postgres(leases.CLAIM)
# A claim waits this long for a lease row that another transaction locks (a fenced apply
# share-locks its conversations' rows until it commits) ...
_CLAIM_LOCK_WAIT = "SET LOCAL lock_timeout = '2s'"
CLAIM_TRIES = 3
# ... and if that transaction is the one of an instance whose lease has expired (it stalled
# in the middle of a commit: stopped, swapped out), that instance's session is ended, as its
# lease is: its writes would be fenced out anyway, and its locks would hold every other
# instance back for as long as it stalls (PostgreSQL 15 has no timeout for a session that
# waits for the rest of a pipeline). The row's locker is its xmax (one locker: no multixact).
_END_STALLED = leases.for_postgres(
    "SELECT pg_terminate_backend(l.pid) FROM leases s JOIN pg_locks l ON l.locktype = 'transactionid'"
    " AND l.mode = 'ExclusiveLock' AND l.granted AND l.transactionid = s.xmax"
    " WHERE s.conversation_id = ?1 AND s.instance NOT IN ('', ?2) AND s.expires_at <= {now}"
    " AND l.pid <> pg_backend_pid()"
)
_RENEW = leases.for_postgres(leases.RENEW)
_EXPIRED = leases.for_postgres(leases.EXPIRED)
_LIVE_INSTANCES = leases.for_postgres(leases.LIVE_INSTANCES)
_SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"

# The hot statement, set-based: a batch's events (most of what the group-commit writer
# sends) go in as one statement over arrays, one column each, instead of a row at a time.
# The same rows, checks and result as writes.INSERT_EVENT's executemany: no event row
# depends on another's.
_BULK = {
    writes.INSERT_EVENT: (
        "INSERT INTO events (conversation_id, seq, type, turn_id, frame, stored_at)"
        " SELECT r.cid, r.seq, r.type, r.turn_id, r.frame, r.at FROM unnest(CAST($1 AS TEXT[]),"
        " CAST($2 AS BIGINT[]), CAST($3 AS TEXT[]), CAST($4 AS TEXT[]), CAST($5 AS TEXT[]),"
        " CAST($6 AS DOUBLE PRECISION[]), CAST($7 AS TEXT[])) AS r (cid, seq, type, turn_id, frame, at, owner)"
        " WHERE EXISTS (SELECT 1 FROM conversations WHERE id = r.cid AND owner = r.owner)"
    ),
}


def redact(url: str) -> str:
    """The URL without its password (in the user part or a `password=` parameter), for
    messages and logs."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url[:40]
    rest = re.sub(r"(?i)([?&]password=)[^&]*", r"\1…", rest)
    credentials, at, host = rest.partition("/")[0].rpartition("@")
    if at and ":" in credentials:
        rest = credentials.partition(":")[0] + ":…@" + rest[len(credentials) + 1 :]
    return f"{scheme}://{rest}"


async def _configure(conn: _Connection) -> None:
    # Every Python int goes out as bigint, whatever its size: one parameter type per
    # statement, so executemany's rows share one prepared statement, and no int4 overflow
    # where a column is bigint.
    conn.adapters.register_dumper(int, Int8Dumper)
    conn.adapters.register_dumper(int, Int8BinaryDumper)
    # Lists (a batch's events column by column, say) go out as binary arrays: the text form
    # escapes every quote and backslash of every element in Python, and a frame is JSON
    # (50 frames of 4.8 KB took 124 ms to write as text, 0.07 ms as binary).
    conn.adapters.register_dumper(list, ListBinaryDumper)


class PostgresStore(Store):
    """A store in a PostgreSQL database (`postgresql://…`, libpq's URL), in the first schema
    of its `search_path` (`?options=-csearch_path%3Dname` picks another than `public`)."""

    kind = "postgresql"

    def __init__(self, url: str, *, min_size: int = 2, max_size: int = 10,
                 index_every: float = pg_search_index.INTERVAL) -> None:
        self.url = url
        self.pool_size = max_size  # the other parts' pools keep to it too (pg_pool.side_pool_size)
        self._index_every = index_every  # seconds between the search indexer's rounds
        self._min_size, self._max_size = max(1, min_size - 1), max(1, max_size - 1)
        self._pool: AsyncConnectionPool[_Connection] | None = None
        # The writer's commits (`apply`, one at a time) have a connection of their own: in
        # the shared pool a commit waited behind every read of the turns starting meanwhile
        # (measured: 100 turns starting at once held a commit, and every first text with
        # it, 119 ms).
        self._writes: AsyncConnectionPool[_Connection] | None = None
        self._indexer: SearchIndexer | None = None

    def __repr__(self) -> str:
        return f"PostgresStore({redact(self.url)!r})"

    async def open(self) -> None:
        if self._pool is not None:
            return
        try:
            conn = await AsyncConnection.connect(self.url, autocommit=True)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to {redact(self.url)}: {exc}") from exc
        async with conn:  # migrated before the pool opens: its connections see the schema
            await migrate(conn)
        pool = self._new_pool("chat-agent-store", self._min_size, self._max_size)
        writes = self._new_pool("chat-agent-store-writes", 1, 1)
        try:
            await pool.open(wait=True, timeout=30)
            await writes.open(wait=True, timeout=30)
        except BaseException:
            await pool.close()
            await writes.close()
            raise
        self._pool, self._writes = pool, writes
        self._indexer = SearchIndexer(self._connection, interval=self._index_every)
        self._indexer.start()

    def _new_pool(self, name: str, min_size: int, max_size: int) -> AsyncConnectionPool[_Connection]:
        return AsyncConnectionPool(
            self.url, min_size=min_size, max_size=max_size, open=False,
            kwargs={"autocommit": True, "cursor_factory": AsyncRawCursor}, configure=_configure, name=name,
        )

    async def close(self) -> None:
        indexer, self._indexer = self._indexer, None
        if indexer is not None:
            await indexer.close()
        pool, self._pool = self._pool, None
        writes, self._writes = self._writes, None
        for each in (pool, writes):
            if each is not None:
                await each.close()

    @asynccontextmanager
    async def _connection(self, *, writing: bool = False) -> AsyncIterator[_Connection]:
        pool = self._writes if writing else self._pool
        if pool is None:
            raise StoreError(f"{self!r} is not open")
        try:
            async with borrow(pool) as conn:
                yield conn
        except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout) as exc:
            if not _unreachable(exc):
                raise
            raise StoreUnavailable(str(exc)) from exc

    async def apply(self, ops: Sequence[Op], fences: Fences | None = None, *, busy: bool = False) -> None:
        steps = writes.plan(ops)
        if not steps:
            return
        await self._apply(steps, fences)

    async def _apply(self, steps: list[tuple[str, list[Any]]], fences: Fences | None) -> None:
        async with self._connection(writing=True) as conn:
            try:
                async with conn.pipeline(), conn.transaction():
                    cursor = conn.cursor()
                    if fences:
                        ids = list(fences)
                        await cursor.execute(CHECK_FENCES, (
                            ids, [fences[c][0] for c in ids], [int(fences[c][1]) for c in ids]))
                    for sql, rows in steps:
                        if sql in _BULK and len(rows) > 1:
                            await cursor.execute(_BULK[sql], [list(column) for column in zip(*rows)])
                        else:
                            await cursor.executemany(to_postgres(sql), rows)
            except psycopg.errors.IntegrityError as exc:
                raise ConstraintError(str(exc)) from exc
            except psycopg.Error as exc:
                if exc.sqlstate == FENCED:
                    raise FencedOut(json.loads(exc.diag.message_detail or "[]")) from exc
                raise

    async def claim_lease(self, conversation_id: str, instance: str, ttl: float) -> Lease | None:
        leases.check_instance(instance)
        for tried in range(1, CLAIM_TRIES + 1):
            try:
                async with self._connection() as conn, conn.transaction():
                    await conn.execute(_CLAIM_LOCK_WAIT)
                    cursor = await conn.execute(_CLAIM, (conversation_id, instance, float(ttl)))
                    rows = await cursor.fetchall()
                return leases.lease(rows[0]) if rows else None
            except psycopg.errors.LockNotAvailable:
                if tried == CLAIM_TRIES:
                    raise StoreUnavailable(f"the lease of {conversation_id} stays locked") from None
                if any(ended for (ended,) in await self._fetch(_END_STALLED, (conversation_id, instance))):
                    log.warning("ended the session of a stalled commit that held the expired lease of %s",
                                conversation_id)
        raise AssertionError("unreachable")

    async def renew_leases(self, instance: str, ttl: float, conversation_ids: Sequence[str]) -> list[Lease]:
        ids = json.dumps(list(conversation_ids))
        return [leases.lease(row) for row in await self._fetch(_RENEW, (instance, float(ttl), ids))]

    async def release_lease(self, conversation_id: str, instance: str, epoch: int) -> None:
        await self._fetch(to_postgres(leases.RELEASE), (conversation_id, instance, epoch))

    async def get_lease(self, conversation_id: str) -> Lease | None:
        rows = await self._fetch(to_postgres(leases.GET), (conversation_id,))
        return leases.lease(rows[0]) if rows else None

    async def expired_leases(self, limit: int = 100) -> list[Lease]:
        return [leases.lease(row) for row in await self._fetch(_EXPIRED, (limit,))]

    async def live_instances(self) -> list[str]:
        return [row[0] for row in await self._fetch(_LIVE_INSTANCES, ())]

    async def get_conversation(self, owner: str, conversation_id: str) -> ConversationRecord | None:
        rows = await self._read(f"{reads.CONVERSATION} WHERE id = ? AND owner = ?", (conversation_id, owner))
        return ConversationRecord(*rows[0]) if rows else None

    async def conversation_taken(self, conversation_id: str) -> bool:
        return bool(await self._read(reads.CONVERSATION_TAKEN, (conversation_id,)))

    async def list_conversations(
        self,
        owner: str,
        limit: int = 50,
        *,
        after: tuple[float, str] | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> list[ConversationRecord]:
        where, params = ["owner = ?"], [owner]
        if since is not None:
            where.append("updated_at > ?")
            params.append(since)
        if until is not None:
            where.append("updated_at <= ?")
            params.append(until)
        if after is not None:  # a plain keyset: the row value compares updated_at, then id
            where.append("(updated_at, id) < (?, ?)")
            params += list(after)
        sql = f"{reads.CONVERSATION} WHERE {' AND '.join(where)} ORDER BY {reads.NEWEST_FIRST} LIMIT ?"
        return [ConversationRecord(*row) for row in await self._read(sql, (*params, limit))]

    async def load_history(
        self, owner: str, conversation_id: str, history: History, leaf: str | None = None
    ) -> list[HistoryItem]:
        if history == "model":
            return await self._tree_read(trees.read_model(owner, conversation_id, leaf))
        return [reads.item(row) for row in await self._read(reads.HISTORY, (conversation_id, owner, history))]

    async def history_page(
        self, owner: str, conversation_id: str, history: History, before: str | None, limit: int,
        leaf: str | None = None,
    ) -> HistoryPage | None:
        if history == "visible":
            return await self._tree_read(trees.read_page(owner, conversation_id, before, limit, leaf))
        async with self._snapshot() as conn:
            end = 2**62  # after any position
            if before is not None:
                found = await _rows(conn, reads.POSITION, (conversation_id, owner, history, before))
                if not found:
                    return None
                end = found[0][0]
            # One more than asked says whether older items exist.
            rows = await _rows(conn, reads.PAGE, (conversation_id, owner, history, end, limit + 1))
        return HistoryPage([reads.item(row) for row in reversed(rows[:limit])], more=len(rows) > limit)

    async def history_size(self, owner: str, conversation_id: str, history: History) -> HistorySize:
        if history == "model":
            return await self._tree_read(trees.read_model_size(owner, conversation_id))
        rows = await self._read(reads.SIZE, (conversation_id, owner, history))
        return HistorySize(*(int(n) for n in rows[0]))

    async def index_search_documents(self) -> int:
        """Indexes every search document waiting now, as the indexer would within a second;
        how many. (A search finds them either way: for benchmarks and tests.)"""
        if self._indexer is None:
            raise StoreError(f"{self!r} is not open")
        return await self._indexer.index_waiting()

    async def search_conversations(self, owner: str, terms: Sequence[str], limit: int,
                                   offset: int = 0) -> list[SearchHit]:
        if not terms:
            return []
        async with self._snapshot() as conn:
            hits = await (await conn.execute(_SEARCH, (" ".join(terms), owner, limit, offset))).fetchall()
            ids = [h[0] for h in hits]
            records = await _rows(conn, f"{reads.CONVERSATION} WHERE owner = ? AND id = ANY(?)", (owner, ids))
        by_id = {row[0]: ConversationRecord(*row) for row in records}
        return [SearchHit(by_id[cid], message_id or None, snippet) for cid, message_id, snippet in hits if cid in by_id]

    async def tree(self, owner: str, conversation_id: str) -> trees.Tree | None:
        return await self._tree_read(trees.read_tree(owner, conversation_id))

    async def _tree_read(self, reading: trees.Reads[T]) -> T:
        async with self._snapshot() as conn:
            return await trees.run_async(reading, lambda sql, params: _rows(conn, sql, params))

    async def events_after(
        self, owner: str, conversation_id: str, after_seq: int, limit: int | None = None
    ) -> list[EventRecord]:
        params = (conversation_id, owner, after_seq, limit)  # LIMIT NULL: no limit
        return [EventRecord(*row) for row in await self._read(reads.EVENTS, params)]

    async def live_view(self, owner: str, conversation_id: str, limit: int) -> LiveView | None:
        async with self._snapshot() as conn:
            rows = await _rows(conn, f"{reads.CONVERSATION} WHERE id = ? AND owner = ?", (conversation_id, owner))
            if not rows:
                return None
            record = ConversationRecord(*rows[0])
            turns = [reads.turn(row) for row in await _rows(conn, reads.RUNNING_TURNS, (conversation_id,))]
            events = []
            if turns:
                first = min(turn.first_seq for turn in turns) - 1
                events = [EventRecord(*row) for row in await _rows(conn, reads.EVENTS, (conversation_id, owner, first, None))
                          if row[1] <= record.last_seq]
            page = await trees.run_async(trees.read_page(owner, conversation_id, None, limit),
                                         lambda sql, params: _rows(conn, sql, params))
        return LiveView(record, turns, events, page)

    async def commit_marked(self, writer: str, n: int) -> bool:
        return bool(await self._read(reads.COMMIT_MARK, (writer, n)))

    async def running_turns(self, conversation_id: str | None = None) -> list[TurnRecord]:
        where, params = ("", ()) if conversation_id is None else (" AND conversation_id = ?", (conversation_id,))
        rows = await self._read(f"{reads.TURN} WHERE status = 'running'{where} ORDER BY started_at, id", params)
        return [reads.turn(row) for row in rows]

    async def get_turn(self, owner: str, turn_id: str) -> TurnRecord | None:
        rows = await self._read(f"{reads.TURN} WHERE id = ? AND owner = ?", (turn_id, owner))
        return reads.turn(rows[0]) if rows else None

    async def usage_totals(self, owner: str, conversation_id: str) -> dict[str, int]:
        rows = await self._fetch(_USAGE, (conversation_id, owner))
        return {key: int(total) for key, total in rows}

    async def tokens_since(self, owner: str, since: float) -> int:
        rows = await self._fetch(_TOKENS_SINCE, (owner, since))
        return int(rows[0][0]) if rows else 0

    async def running_turn_count(self, owner: str) -> int:
        rows = await self._fetch(_RUNNING_OF, (owner,))
        return int(rows[0][0]) if rows else 0

    async def has_client_message_id(self, owner: str, conversation_id: str, client_id: str) -> bool:
        return bool(await self._read(reads.CLIENT_ID, (conversation_id, owner, client_id)))

    async def get_artifact(self, owner: str, conversation_id: str) -> ArtifactRecord | None:
        async with self._snapshot() as conn:
            found = await _rows(conn, reads.ARTIFACT, (conversation_id, owner))
            if not found:
                return None
            row = found[0]
            current = await _version(conn, conversation_id, row[4:])
        return ArtifactRecord(*row[:4], current=current)

    async def get_artifact_version(
        self, owner: str, conversation_id: str, index: int
    ) -> ArtifactVersionRecord | None:
        async with self._snapshot() as conn:
            found = await _rows(conn, reads.ARTIFACT_VERSION, (conversation_id, owner, index))
            return await _version(conn, conversation_id, found[0]) if found else None

    async def list_artifact_versions(self, owner: str, conversation_id: str) -> list[ArtifactVersionInfo]:
        return [ArtifactVersionInfo(*row) for row in await self._read(reads.ARTIFACT_VERSIONS, (conversation_id, owner))]

    async def get_memories(self, owner: str) -> MemoriesRecord | None:
        rows = await self._read(reads.MEMORIES, (owner,))
        return reads.memories(rows[0]) if rows else None

    async def swap_memories(self, owner: str, record: MemoriesRecord, expected: str | None) -> MemoriesRecord | None:
        version = writes.new_version()
        sql, params = writes.swap_memories(owner, record, expected, version)
        rows = await self._read(sql, params)
        return dataclasses.replace(record, version=version) if rows else None

    async def list_quick_actions(self, owner: str) -> list[QuickActionRecord]:
        rows = await self._read(f"{reads.QUICK_ACTION} ORDER BY created_at, id", (owner,))
        return [reads.quick_action(row) for row in rows]

    async def get_quick_action(self, owner: str, id: str) -> QuickActionRecord | None:
        rows = await self._read(f"{reads.QUICK_ACTION} AND id = ?", (owner, id))
        return reads.quick_action(rows[0]) if rows else None

    async def get_file(self, owner: str, file_id: str) -> FileRecord | None:
        rows = await self._read(reads.FILE, (file_id, owner))
        return FileRecord(*rows[0]) if rows else None

    async def conversation_files(self, owner: str, conversation_id: str) -> list[FileRecord]:
        return [FileRecord(*row) for row in await self._fetch(_CONVERSATION_FILES, (conversation_id, owner))]

    async def _read(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """A shared statement (SQLite's placeholders)."""
        return await self._fetch(to_postgres(sql), params)

    async def _fetch(self, sql: str, params: Sequence[Any]) -> list[Any]:
        async with self._connection() as conn:
            cursor = await conn.execute(sql, params)
            return await cursor.fetchall() if cursor.description else []

    @asynccontextmanager
    async def _snapshot(self) -> AsyncIterator[_Connection]:
        """A connection whose statements all see one snapshot of the database."""
        async with self._connection() as conn:
            await conn.execute(_SNAPSHOT)
            try:
                yield conn
            finally:
                await conn.execute("COMMIT")


# ts_rank: higher is better. The best document of each conversation, then the conversations by
# it; ts_headline (costly: it reads the text again) only for the page's. A document not indexed
# yet (pg_search_index.py) is read as its text: the partial index of those waiting finds the
# few there are (apart, not in an OR with the GIN index's condition, which would read every
# document of the owner).
_SEARCH = (
    "WITH q AS (SELECT plainto_tsquery('simple', $1) AS q),"
    " hits AS (SELECT d.conversation_id, d.message_id, d.body, ts_rank(d.tsv, q.q) AS rank FROM search_docs d, q"
    " WHERE d.owner = $2 AND d.tsv @@ q.q"
    " UNION ALL SELECT d.conversation_id, d.message_id, d.body, ts_rank(to_tsvector('simple', d.body), q.q)"
    " FROM search_docs d, q WHERE d.owner = $2 AND d.tsv IS NULL AND to_tsvector('simple', d.body) @@ q.q),"
    " best AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY conversation_id ORDER BY rank DESC, message_id) AS n"
    " FROM hits),"
    " page AS (SELECT * FROM best WHERE n = 1 ORDER BY rank DESC, conversation_id LIMIT $3 OFFSET $4)"
    " SELECT p.conversation_id, p.message_id,"
    " ts_headline('simple', p.body, q.q, 'StartSel=\"\", StopSel=\"\", MaxWords=24, MinWords=8, MaxFragments=1')"
    " FROM page p, q ORDER BY p.rank DESC, p.conversation_id"
)


async def _rows(conn: _Connection, sql: str, params: Sequence[Any]) -> list[Any]:
    cursor = await conn.execute(to_postgres(sql), params)
    return await cursor.fetchall()


async def _version(conn: _Connection, conversation_id: str, row: Sequence[Any]) -> ArtifactVersionRecord:
    base_idx = row[-2]
    chain = None if base_idx is None else await _rows(conn, reads.CHAIN, (conversation_id, base_idx))
    return reads.version(conversation_id, row, chain)


def _unreachable(exc: Exception) -> bool:
    """Whether the error says the database cannot be reached (the connection, the pool, a
    server shutting down), not that a statement failed (a lock not granted in time, say)."""
    state = getattr(exc, "sqlstate", None)
    return state is None or state.startswith(("08", "53")) or state in ("57P01", "57P02", "57P03")
