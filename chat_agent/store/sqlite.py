"""`SqliteStore`: the default backend, one SQLite file in WAL mode.

Reads run on a worker thread, each one job there (measured: a commit under load went from
12.7 ms with a hop per statement, through aiosqlite, to a few ms). A read of one row by key
that every turn makes (`_lookup`) runs on the event loop's thread instead. Writes have a
connection of their own, and WAL lets no read see half a batch.

A small batch (what one conversation's step writes: a few frames, a history item)
commits on the event loop's own thread: with WAL and synchronous=NORMAL it costs ~0.1 ms of
CPU, less than the two thread hops it would otherwise take, and those hops sat on every
frame's way to its clients (`done` waits for its commit; measured: the wait for a turn's
last commit went from 0.48 to 0.24 ms). A bigger batch (many conversations streaming, a
summary, a big artifact) commits on a thread of its own, so that the event loop goes on
meanwhile. Except when the loop is busy (`apply(..., busy=True)`, the writer's call): then
the thread fights the loop for the GIL, which sqlite3 gives up and takes back around every
statement step, and every take waits up to the switch interval (5 ms) while the loop runs.
Measured with 200 sessions streaming: a 118-row commit took 325 ms there and held every
frame of the batch; inline, batches of up to a few thousand rows take 1-15 ms. Inline, a
lock is never waited for: when another process holds it (several instances on one file)
the batch goes to the thread too, which waits out the busy timeout.

`inline=True` runs everything on the event loop's thread, with no worker thread at all: for
a small in-memory database, and for the deterministic simulation (tests/sim), where every
step must happen on its loop, in the order its scheduler chooses.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from chat_agent import clock
from chat_agent.store import leases, reads, writes
from chat_agent.store import tree_reads as trees
from chat_agent.store.base import ConstraintError, Fences, FencedOut, Store, StoreError, StoreUnavailable
from chat_agent.store.checkpoint import INTERVAL, NO_AUTO_CHECKPOINT, WalCheckpointer
from chat_agent.store.ops import Op
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
from chat_agent.store.schema import INDEX_PENDING, PRAGMAS, migrate
from chat_agent.store.writes import plan

MEMORY = ":memory:"
T = TypeVar("T")
# The most a batch may write and still commit inline (see above): when the loop is idle,
# and when it is busy.
INLINE_ROWS = 16
INLINE_CHARS = 16_000
BUSY_INLINE_ROWS = 4096
BUSY_INLINE_CHARS = 1_000_000
BUSY_TIMEOUT_MS = 5000

# Only numbers are summed: usage may also hold nested objects or flags.
_USAGE = (
    "SELECT u.key, SUM(u.value) FROM turns t, json_each(t.usage) u"
    " WHERE t.conversation_id = ? AND t.owner = ? AND t.status != 'running'"
    " AND t.usage IS NOT NULL AND u.type IN ('integer', 'real') GROUP BY u.key"
)

_TOKENS_SINCE = (
    "SELECT COALESCE(SUM(u.value), 0) FROM turns t, json_each(t.usage) u"
    " WHERE t.owner = ? AND t.ended_at >= ? AND t.usage IS NOT NULL"
    " AND u.type IN ('integer', 'real') AND u.key LIKE '%Tokens'"
)
_RUNNING_OF = "SELECT COUNT(*) FROM turns WHERE owner = ? AND status = 'running'"
_CONVERSATION_FILES = (
    f"SELECT {reads.FILE_COLUMNS} FROM conversation_files l"
    " JOIN conversations c ON c.id = l.conversation_id JOIN files f ON f.id = l.file_id"
    " WHERE c.id = ? AND c.owner = ? AND f.owner = c.owner ORDER BY l.added_at, l.rowid"
)


_FENCES = (
    "SELECT conversation_id, instance, epoch FROM leases"
    " WHERE conversation_id IN (SELECT value FROM json_each(?))"
)
# The usual case, a batch of one conversation: a key lookup, without encoding a list as
# JSON and reading it back (measured: the dearest statement of a small commit otherwise).
_FENCE = "SELECT conversation_id, instance, epoch FROM leases WHERE conversation_id = ?"
_CLAIM = leases.for_sqlite(leases.CLAIM)
_RENEW = leases.for_sqlite(leases.RENEW)
_EXPIRED = leases.for_sqlite(leases.EXPIRED)
_LIVE_INSTANCES = leases.for_sqlite(leases.LIVE_INSTANCES)


class SqliteStore(Store):
    """A store in one SQLite file (created with its directories), or `":memory:"`."""

    kind = "sqlite"

    def __init__(self, path: str | os.PathLike[str], *, checkpoint_interval: float = INTERVAL,
                 inline: bool = False) -> None:
        self.path = path if path == MEMORY else Path(path)
        self._checkpoint_interval = checkpoint_interval
        self._inline = inline  # every statement on the loop's thread (see the module's doc)
        self._db: sqlite3.Connection | None = None  # reads, on `_thread`
        self._writes: sqlite3.Connection | None = None  # writes: inline or on `_write_thread`
        self._thread: ThreadPoolExecutor | None = None
        self._write_thread: ThreadPoolExecutor | None = None
        self._write_lock = asyncio.Lock()
        self._checkpointer: WalCheckpointer | None = None

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"

    async def open(self) -> None:
        if self._db is not None:
            return
        if isinstance(self.path, Path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._inline:
            self._db = self._connect()
            self._writes = self._db if self.path == MEMORY else self._connect(for_writes=True)
            return
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")
        self._write_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-write")
        try:
            self._db = await self._run(self._connect)
            # An in-memory database exists once per connection: its writes share the reads' one.
            self._writes = self._db if self.path == MEMORY else self._connect(for_writes=True)
        except BaseException:
            if self._db is not None:
                await self._run(self._db.close)
                self._db = None
            for pool in (self._thread, self._write_thread):
                pool.shutdown(wait=False)
            self._thread = self._write_thread = None
            raise
        if isinstance(self.path, Path):
            self._checkpointer = WalCheckpointer(self.path, self._checkpoint_interval)
            self._checkpointer.start()

    def _connect(self, for_writes: bool = False) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN/COMMIT ourselves instead of letting the
        # sqlite3 module open transactions implicitly. The write connection is used from the
        # event loop's thread and the write thread, never from both at once (`_write_lock`).
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=not for_writes)
        try:
            for pragma in PRAGMAS:
                db.execute(pragma)
            self._check_wal(db)
            if self.path != MEMORY:
                db.execute(NO_AUTO_CHECKPOINT)  # see checkpoint.py
            if for_writes:
                db.execute("PRAGMA busy_timeout = 0")  # see `apply`: inline, a lock is never waited for
                return db
            migrate(db)
        except BaseException:
            db.close()
            raise
        return db

    async def close(self) -> None:
        checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            await checkpointer.close()
        async with self._write_lock:  # a commit under way finishes first
            writes, self._writes = self._writes, None
            if writes is not None and writes is not self._db:
                writes.close()
        db, self._db = self._db, None
        if db is not None:
            await self._run(db.close)
        for pool in (self._thread, self._write_thread):
            if pool is not None:
                pool.shutdown(wait=True)
        self._thread = self._write_thread = None

    async def apply(self, ops: Sequence[Op], fences: Fences | None = None, *, busy: bool = False) -> None:
        steps = plan(ops)
        if not steps:
            return
        job = lambda db: _apply(db, steps, dict(fences or {}))  # noqa: E731
        limits = (BUSY_INLINE_ROWS, BUSY_INLINE_CHARS) if busy else (INLINE_ROWS, INLINE_CHARS)
        await self._writing(job, inline=_small(steps, *limits))

    def apply_now(self, ops: Sequence[Op], fences: Fences | None = None) -> bool:
        """Inline as a busy loop's commit is (`apply`), if no commit is under way on the write
        connection and no other process holds the write lock (not waited for: False). An
        in-memory database's one connection lives on the read thread: never, unless inline."""
        db = self._writes
        if db is None or (db is self._db and not self._inline) or self._write_lock.locked():
            return False
        steps = plan(ops)
        if not steps:
            return True
        if not _small(steps, BUSY_INLINE_ROWS, BUSY_INLINE_CHARS):
            return False
        try:
            with _disk_failures():
                _apply(db, steps, dict(fences or {}))
        except _Locked:
            return False
        return True

    async def _writing(self, job: Callable[[sqlite3.Connection], T], *, inline: bool = False) -> T:
        """Runs a write transaction on the write connection: inline when asked and the write
        lock is free, else on the write thread, waiting for the lock up to the busy timeout.
        A full or failing disk is StoreUnavailable (`_disk_failures`)."""
        with _disk_failures():
            return await self._write_job(job, inline)

    async def _write_job(self, job: Callable[[sqlite3.Connection], T], inline: bool) -> T:
        async with self._write_lock:
            db = self._writes
            if db is None:
                raise StoreError(f"{self!r} is not open")
            if db is self._db:  # in memory: the one connection lives on the read thread
                return await self._run(job, db)
            if inline or self._inline:
                try:
                    return job(db)
                except _Locked as exc:
                    if self._inline:  # no thread to wait on: a failed commit, tried again
                        raise exc.__cause__ from None
                    # another process writes: wait for it on the thread
            future = asyncio.get_running_loop().run_in_executor(self._write_thread, _waiting, job, db)
            try:
                return await asyncio.shield(future)
            except asyncio.CancelledError:
                # The thread still uses the connection: keep the lock until it is done with it.
                await asyncio.wait([future])
                raise

    async def claim_lease(self, conversation_id: str, instance: str, ttl: float) -> Lease | None:
        leases.check_instance(instance)
        rows = await self._write(_CLAIM, (conversation_id, instance, ttl, clock.now()))
        return leases.lease(rows[0]) if rows else None

    async def renew_leases(self, instance: str, ttl: float, conversation_ids: Sequence[str]) -> list[Lease]:
        ids = json.dumps(list(conversation_ids))
        return [leases.lease(row) for row in await self._write(_RENEW, (instance, ttl, ids, clock.now()))]

    async def release_lease(self, conversation_id: str, instance: str, epoch: int) -> None:
        await self._write(leases.RELEASE, (conversation_id, instance, epoch))

    async def get_lease(self, conversation_id: str) -> Lease | None:
        rows = await self._fetch(leases.GET, (conversation_id,))
        return leases.lease(rows[0]) if rows else None

    async def expired_leases(self, limit: int = 100) -> list[Lease]:
        return [leases.lease(row) for row in await self._fetch(_EXPIRED, (limit, clock.now()))]

    async def live_instances(self) -> list[str]:
        return [row[0] for row in await self._fetch(_LIVE_INSTANCES, (clock.now(),))]

    async def _write(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """One statement in a transaction of its own, its RETURNING rows read before COMMIT.
        Inline, like a small batch: these are the leases (and memories), and on the write
        thread a busy event loop holds each RETURNING row up for the GIL (measured: renewing
        1,000 leases there took seconds under load, and they expired while held)."""
        def write(db: sqlite3.Connection) -> list[Any]:
            _begin(db)
            try:
                rows = db.execute(sql, params).fetchall()
                db.execute("COMMIT")
            except BaseException:
                db.rollback()
                raise
            return rows

        return await self._writing(write, inline=True)

    async def get_conversation(self, owner: str, conversation_id: str) -> ConversationRecord | None:
        sql = f"{reads.CONVERSATION} WHERE id = ? AND owner = ?"
        rows = await self._fetch(sql, (conversation_id, owner))
        return ConversationRecord(*rows[0]) if rows else None

    async def conversation_taken(self, conversation_id: str) -> bool:
        return bool(await self._fetch(reads.CONVERSATION_TAKEN, (conversation_id,)))

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
        return [ConversationRecord(*row) for row in await self._fetch(sql, (*params, limit))]

    async def load_history(
        self, owner: str, conversation_id: str, history: History, leaf: str | None = None
    ) -> list[HistoryItem]:
        if history == "model":
            return await self._read(lambda db: trees.run_sync(trees.read_model(owner, conversation_id, leaf), _executor(db)))
        rows = await self._fetch(reads.HISTORY, (conversation_id, owner, history))
        return [reads.item(row) for row in rows]

    async def history_page(
        self, owner: str, conversation_id: str, history: History, before: str | None, limit: int,
        leaf: str | None = None,
    ) -> HistoryPage | None:
        if history == "visible":
            reading = trees.read_page(owner, conversation_id, before, limit, leaf)
            return await self._read(lambda db: trees.run_sync(reading, _executor(db)))

        def page(db: sqlite3.Connection) -> HistoryPage | None:
            end = 2**62  # after any position
            if before is not None:
                found = db.execute(reads.POSITION, (conversation_id, owner, history, before)).fetchall()
                if not found:
                    return None
                end = found[0][0]
            # One more than asked says whether older items exist.
            rows = db.execute(reads.PAGE, (conversation_id, owner, history, end, limit + 1)).fetchall()
            return HistoryPage([reads.item(row) for row in reversed(rows[:limit])], more=len(rows) > limit)

        return await self._read(page)

    async def history_size(self, owner: str, conversation_id: str, history: History) -> HistorySize:
        if history == "model":
            return await self._read(lambda db: trees.run_sync(trees.read_model_size(owner, conversation_id),
                                                             _executor(db)))
        rows = await self._fetch(reads.SIZE, (conversation_id, owner, history))
        return HistorySize(*rows[0])

    async def search_conversations(self, owner: str, terms: Sequence[str], limit: int,
                                   offset: int = 0) -> list[SearchHit]:
        match = " ".join('"' + term.replace('"', '""') + '"' for term in terms)

        def search(db: sqlite3.Connection) -> list[SearchHit]:
            page = db.execute(_SEARCH, (match, owner, limit, offset)).fetchall()
            snippets = dict(db.execute(_snippets(len(page)), (match, *(h[2] for h in page))).fetchall())
            hits = [(cid, message_id, snippets.get(rowid, "")) for cid, message_id, rowid in page]
            return _search_hits(hits, db.execute(_conversations(len(hits)), (owner, *(h[0] for h in hits))).fetchall())

        return await self._read(search) if terms else []

    async def tree(self, owner: str, conversation_id: str) -> trees.Tree | None:
        return await self._read(lambda db: trees.run_sync(trees.read_tree(owner, conversation_id), _executor(db)))

    async def events_after(
        self, owner: str, conversation_id: str, after_seq: int, limit: int | None = None
    ) -> list[EventRecord]:
        # LIMIT -1 is SQLite's "no limit".
        params = (conversation_id, owner, after_seq, -1 if limit is None else limit)
        return [EventRecord(*row) for row in await self._fetch(reads.EVENTS, params)]

    async def live_view(self, owner: str, conversation_id: str, limit: int) -> LiveView | None:
        def view(db: sqlite3.Connection) -> LiveView | None:  # one read transaction: one snapshot
            rows = db.execute(f"{reads.CONVERSATION} WHERE id = ? AND owner = ?", (conversation_id, owner)).fetchall()
            if not rows:
                return None
            record = ConversationRecord(*rows[0])
            turns = [reads.turn(row) for row in db.execute(reads.RUNNING_TURNS, (conversation_id,)).fetchall()]
            events = []
            if turns:
                first = min(turn.first_seq for turn in turns) - 1
                events = [EventRecord(*row) for row in db.execute(reads.EVENTS, (conversation_id, owner, first, -1))
                          if row[1] <= record.last_seq]
            page = trees.run_sync(trees.read_page(owner, conversation_id, None, limit), _executor(db))
            return LiveView(record, turns, events, page)

        return await self._read(view)

    async def commit_marked(self, writer: str, n: int) -> bool:
        return bool(await self._fetch(reads.COMMIT_MARK, (writer, n)))

    async def running_turns(self, conversation_id: str | None = None) -> list[TurnRecord]:
        where, params = ("", ()) if conversation_id is None else (" AND conversation_id = ?", (conversation_id,))
        rows = await self._fetch(f"{reads.TURN} WHERE status = 'running'{where} ORDER BY started_at, id", params)
        return [reads.turn(row) for row in rows]

    async def get_turn(self, owner: str, turn_id: str) -> TurnRecord | None:
        rows = await self._fetch(f"{reads.TURN} WHERE id = ? AND owner = ?", (turn_id, owner))
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

    async def has_client_message_id(
        self, owner: str, conversation_id: str, client_id: str
    ) -> bool:
        return bool(await self._lookup(reads.CLIENT_ID, (conversation_id, owner, client_id)))

    async def get_artifact(self, owner: str, conversation_id: str) -> ArtifactRecord | None:
        def read(db: sqlite3.Connection) -> ArtifactRecord | None:
            rows = db.execute(reads.ARTIFACT, (conversation_id, owner)).fetchall()
            if not rows:
                return None
            return ArtifactRecord(*rows[0][:4], current=_version(db, conversation_id, rows[0][4:]))

        return await self._read(read)

    async def get_artifact_version(
        self, owner: str, conversation_id: str, index: int
    ) -> ArtifactVersionRecord | None:
        def read(db: sqlite3.Connection) -> ArtifactVersionRecord | None:
            rows = db.execute(reads.ARTIFACT_VERSION, (conversation_id, owner, index)).fetchall()
            return _version(db, conversation_id, rows[0]) if rows else None

        return await self._read(read)

    async def list_artifact_versions(self, owner: str, conversation_id: str) -> list[ArtifactVersionInfo]:
        return [ArtifactVersionInfo(*row) for row in await self._fetch(reads.ARTIFACT_VERSIONS, (conversation_id, owner))]

    async def get_memories(self, owner: str) -> MemoriesRecord | None:
        rows = await self._lookup(reads.MEMORIES, (owner,))
        if not rows:
            return None
        return reads.memories(rows[0])

    async def swap_memories(self, owner: str, record: MemoriesRecord, expected: str | None) -> MemoriesRecord | None:
        version = writes.new_version()
        rows = await self._write(*writes.swap_memories(owner, record, expected, version))
        return dataclasses.replace(record, version=version) if rows else None

    async def list_quick_actions(self, owner: str) -> list[QuickActionRecord]:
        rows = await self._fetch(f"{reads.QUICK_ACTION} ORDER BY created_at, id", (owner,))
        return [reads.quick_action(row) for row in rows]

    async def get_quick_action(self, owner: str, id: str) -> QuickActionRecord | None:
        rows = await self._fetch(f"{reads.QUICK_ACTION} AND id = ?", (owner, id))
        return reads.quick_action(rows[0]) if rows else None

    async def get_file(self, owner: str, file_id: str) -> FileRecord | None:
        rows = await self._fetch(reads.FILE, (file_id, owner))
        return FileRecord(*rows[0]) if rows else None

    async def conversation_files(self, owner: str, conversation_id: str) -> list[FileRecord]:
        return [FileRecord(*row) for row in await self._fetch(_CONVERSATION_FILES, (conversation_id, owner))]

    def _check_wal(self, db: sqlite3.Connection) -> None:
        # SQLite silently keeps its old journal mode where WAL is impossible (some network
        # file systems); the durability promise depends on WAL, so say so instead.
        rows = db.execute("PRAGMA journal_mode").fetchall()
        mode = str(rows[0][0]).lower()
        if mode != "wal" and self.path != MEMORY:
            raise StoreError(f"{self!r}: journal_mode is {mode!r}, WAL is required")

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError(f"{self!r} is not open")
        return self._db

    async def _run(self, job: Callable[..., T], *args: Any) -> T:
        if self._inline:
            return job(*args)
        if self._thread is None:
            raise StoreError(f"{self!r} is not open")
        return await asyncio.get_running_loop().run_in_executor(self._thread, job, *args)

    async def _fetch(self, sql: str, params: Sequence[Any]) -> list[Any]:
        return await self._read(lambda db: db.execute(sql, params).fetchall())

    async def _lookup(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """A read of one row by its key, which every turn makes before its first model call
        (the user's memories, a message id): on the event loop's thread, on the write
        connection while no write is under way on it. The hop to the read thread and back
        costs ~10× the read (measured: 0.3 ms against 0.03 ms, on the way to the model).
        One statement sees one committed state, like any read; a lock it would have to wait
        for (another process recovering the WAL) sends it to the read thread."""
        db = self._writes
        if db is not None and db is not self._db and not self._write_lock.locked():
            try:
                return db.execute(sql, params).fetchall()
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                    raise
        return await self._fetch(sql, params)

    async def _read(self, job: Callable[[sqlite3.Connection], T]) -> T:
        """`job`'s reads in one read transaction: they all see the same committed state (writes
        commit on another connection meanwhile), and it ends with the job, so that no
        statement left open keeps this connection on an old snapshot."""
        def read() -> T:
            db = self._conn()
            db.execute("BEGIN")
            try:
                return job(db)
            finally:
                db.execute("COMMIT")

        return await self._run(read)


# bm25: lower is better. The best document of each conversation, then the conversations by it;
# snippets (costly: each reads its document again) only for the page's, in a second statement.
_SEARCH = (
    "WITH hits AS (SELECT d.id, d.conversation_id, d.message_id, bm25(search_fts) AS rank"
    " FROM search_fts JOIN search_docs d ON d.id = search_fts.rowid WHERE search_fts MATCH ?1 AND d.owner = ?2),"
    " best AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY conversation_id ORDER BY rank, message_id) AS n FROM hits)"
    " SELECT conversation_id, message_id, id FROM best WHERE n = 1 ORDER BY rank, conversation_id LIMIT ?3 OFFSET ?4"
)


def _snippets(count: int) -> str:
    return ("SELECT rowid, snippet(search_fts, 0, '', '', '…', 16) FROM search_fts WHERE search_fts MATCH ?"
            f" AND rowid IN ({', '.join('?' * count)})")


def _conversations(count: int) -> str:
    return f"{reads.CONVERSATION} WHERE owner = ? AND id IN ({', '.join('?' * count)})"


def _search_hits(hits: Sequence[Sequence[Any]], records: Sequence[Sequence[Any]]) -> list[SearchHit]:
    by_id = {row[0]: ConversationRecord(*row) for row in records}
    return [SearchHit(by_id[cid], message_id or None, snippet) for cid, message_id, snippet in hits if cid in by_id]


def _executor(db: sqlite3.Connection) -> Callable[[str, Sequence[Any]], list[Any]]:
    return lambda sql, params: db.execute(sql, params).fetchall()


def _version(db: sqlite3.Connection, conversation_id: str, row: Sequence[Any]) -> ArtifactVersionRecord:
    """A version row with its content resolved. Versions never change once written, so
    reading the chain after the row is consistent."""
    base_idx = row[-2]
    chain = None if base_idx is None else db.execute(reads.CHAIN, (conversation_id, base_idx)).fetchall()
    return reads.version(conversation_id, row, chain)


_ANY_PENDING = "SELECT 1 FROM search_pending LIMIT 1"


@contextmanager
def _disk_failures() -> Iterator[None]:
    """A full or failing disk is StoreUnavailable: waited out, like a cut database."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorcode", None) in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR):
            raise StoreUnavailable(str(exc)) from exc
        raise


class _Locked(Exception):
    """Another connection holds the write lock; nothing was written."""


def _small(steps: list[tuple[str, list[Any]]], max_rows: int, max_chars: int) -> bool:
    if sum(len(rows) for _, rows in steps) > max_rows:
        return False
    return sum(len(value) for _, rows in steps for row in rows for value in row if isinstance(value, str)) <= max_chars


def _begin(db: sqlite3.Connection) -> None:
    """BEGIN IMMEDIATE: `_Locked` when the connection's busy timeout passed (at once on the
    write connection, inline) with another connection holding the write lock."""
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            raise _Locked() from exc
        raise


def _apply(db: sqlite3.Connection, steps: list[tuple[str, list[Any]]], fences: dict[str, tuple[str, int]]) -> None:
    # IMMEDIATE: take the write lock up front so COMMIT cannot meet SQLITE_BUSY; it also
    # keeps every other process's claim out until this batch is in, so the fence holds.
    _begin(db)
    try:
        if fences:
            if len(fences) == 1:
                held = db.execute(_FENCE, tuple(fences)).fetchall()
            else:
                held = db.execute(_FENCES, (json.dumps(list(fences)),)).fetchall()
            if fenced := leases.fenced_out(fences, held):
                raise FencedOut(fenced)
        for sql, rows in steps:
            db.executemany(sql, rows)
        if db.execute(_ANY_PENDING).fetchone() is not None:  # the batch's new search documents
            for sql in INDEX_PENDING:
                db.execute(sql)
        db.execute("COMMIT")
    except BaseException as exc:
        db.rollback()
        if isinstance(exc, sqlite3.IntegrityError):
            raise ConstraintError(str(exc)) from exc
        raise


def _waiting(job: Callable[[sqlite3.Connection], T], db: sqlite3.Connection) -> T:
    """`job` on the write thread, waiting up to the busy timeout for the write lock."""
    db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    try:
        try:
            return job(db)
        except _Locked as exc:
            raise exc.__cause__ from None  # the lock was not freed in time: a failed commit, retried
    finally:
        db.execute("PRAGMA busy_timeout = 0")
