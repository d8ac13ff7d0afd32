"""`SqliteStore`: the default backend, one SQLite file in WAL mode.

Reads run on a worker thread, each one job there (measured: a commit under load went from
12.7 ms with a hop per statement, through aiosqlite, to a few ms). Writes have a
connection of their own, and WAL lets no read see half a batch.

A small batch (what one conversation's step writes: a few frames, a history item)
commits on the event loop's own thread: with WAL and synchronous=NORMAL it costs ~0.1 ms of
CPU, less than the two thread hops it would otherwise take, and those hops sat on every
frame's way to its clients (`done` waits for its commit; measured: the wait for a turn's
last commit went from 0.48 to 0.24 ms). A bigger batch (many conversations streaming, a
summary, a big artifact) commits on a thread of its own, so that the event loop goes on
meanwhile. Inline, a lock is never waited for: when another process holds it (several
instances on one file) the batch goes to the thread too, which waits out the busy timeout.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from chat_agent import edits
from chat_agent.store.base import ConstraintError, Store, StoreError
from chat_agent.store.checkpoint import INTERVAL, NO_AUTO_CHECKPOINT, WalCheckpointer
from chat_agent.store.ops import Op
from chat_agent.store.records import (
    ArtifactRecord,
    ArtifactVersionRecord,
    ConversationRecord,
    EventRecord,
    FileRecord,
    History,
    HistoryItem,
    HistoryPage,
    HistorySize,
    MemoriesRecord,
    QuickActionRecord,
    TurnRecord,
)
from chat_agent.store.schema import PRAGMAS, migrate
from chat_agent.store.writes import plan

MEMORY = ":memory:"
# The most a batch may write and still commit inline (see above).
INLINE_ROWS = 16
INLINE_CHARS = 16_000
BUSY_TIMEOUT_MS = 5000
T = TypeVar("T")

_CONVERSATION = (
    "SELECT id, owner, title, created_at, updated_at, last_seq, context_overhead FROM conversations"
)
# A total order (ids are unique), so a page can start exactly after the last row of the one
# before; the index on (owner, updated_at DESC) serves it, ties on updated_at sorted by id.
_NEWEST_FIRST = "updated_at DESC, id DESC"
_TURN = (
    "SELECT id, conversation_id, owner, message_id, status, started_at, first_seq,"
    " ended_at, stop_reason, usage FROM turns"
)
_HISTORY = (
    "SELECT h.id, h.data, h.tokens, h.chars FROM history_items h"
    " JOIN conversations c ON c.id = h.conversation_id"
    " WHERE c.id = ? AND c.owner = ? AND h.history = ? ORDER BY h.pos"
)
# Positions never change once given (an upsert keeps its item's), so paging by position is stable.
_POSITION = (
    "SELECT h.pos FROM history_items h JOIN conversations c ON c.id = h.conversation_id"
    " WHERE c.id = ? AND c.owner = ? AND h.history = ? AND h.id = ?"
)
_PAGE = (
    "SELECT h.id, h.data, h.tokens, h.chars FROM history_items h"
    " JOIN conversations c ON c.id = h.conversation_id"
    " WHERE c.id = ? AND c.owner = ? AND h.history = ? AND h.pos < ? ORDER BY h.pos DESC LIMIT ?"
)
_SIZE = (
    "SELECT COUNT(*), COALESCE(SUM(h.tokens), 0), COALESCE(SUM(h.chars), 0) FROM history_items h"
    " JOIN conversations c ON c.id = h.conversation_id"
    " WHERE c.id = ? AND c.owner = ? AND h.history = ?"
)
_EVENTS = (
    "SELECT e.conversation_id, e.seq, e.type, e.turn_id, e.frame FROM events e"
    " JOIN conversations c ON c.id = e.conversation_id"
    " WHERE c.id = ? AND c.owner = ? AND e.seq > ? ORDER BY e.seq LIMIT ?"
)
# Only numbers are summed: usage may also hold nested objects or flags.
_USAGE = (
    "SELECT u.key, SUM(u.value) FROM turns t, json_each(t.usage) u"
    " WHERE t.conversation_id = ? AND t.owner = ? AND t.status != 'running'"
    " AND t.usage IS NOT NULL AND u.type IN ('integer', 'real') GROUP BY u.key"
)
_CLIENT_ID = (
    "SELECT 1 FROM client_message_ids m JOIN conversations c ON c.id = m.conversation_id"
    " WHERE c.id = ? AND c.owner = ? AND m.client_id = ?"
)

# A version row, then how its content is kept (see schema.py, migration 5).
_VERSION_COLUMNS = "v.idx, v.type, v.title, v.language, v.content, v.created_at, v.source, v.base_idx, v.changes"
# Joined on current_index: only the current version's content is read.
_ARTIFACT = (
    f"SELECT a.id, a.conversation_id, a.current_index, a.version_count, {_VERSION_COLUMNS}"
    " FROM artifacts a JOIN conversations c ON c.id = a.conversation_id"
    " JOIN artifact_versions v ON v.conversation_id = a.conversation_id"
    " AND v.idx = a.current_index WHERE c.id = ? AND c.owner = ?"
)
_ARTIFACT_VERSION = (
    f"SELECT {_VERSION_COLUMNS} FROM artifact_versions v"
    " JOIN conversations c ON c.id = v.conversation_id"
    " WHERE c.id = ? AND c.owner = ? AND v.idx = ?"
)
# A delta's base, the base's base, … down to the snapshot, nearest first: one statement,
# each step a primary-key lookup, at most MAX_CHAIN + 1 rows (writes.py).
_CHAIN = (
    "WITH RECURSIVE chain (depth, base_idx, content, changes) AS ("
    " SELECT 0, base_idx, content, changes FROM artifact_versions WHERE conversation_id = ?1 AND idx = ?2"
    " UNION ALL SELECT c.depth + 1, v.base_idx, v.content, v.changes FROM chain c"
    " JOIN artifact_versions v ON v.conversation_id = ?1 AND v.idx = c.base_idx)"
    " SELECT base_idx, content, changes FROM chain ORDER BY depth"
)
_MEMORIES = "SELECT style_rules, content, updated_at FROM memories WHERE owner = ?"
_QUICK_ACTION = (
    "SELECT id, owner, title, prompt, include_reflections, include_prefix,"
    " include_recent_history, created_at, updated_at FROM quick_actions WHERE owner = ?"
)

_FILE_COLUMNS = (
    "f.id, f.owner, f.filename, f.media_type, f.size, f.source, f.width, f.height, f.blob_key,"
    " f.created_at"
)
_FILE = f"SELECT {_FILE_COLUMNS} FROM files f WHERE f.id = ? AND f.owner = ?"
_CONVERSATION_FILES = (
    f"SELECT {_FILE_COLUMNS} FROM conversation_files l"
    " JOIN conversations c ON c.id = l.conversation_id JOIN files f ON f.id = l.file_id"
    " WHERE c.id = ? AND c.owner = ? AND f.owner = c.owner ORDER BY l.added_at, l.rowid"
)


class SqliteStore(Store):
    """A store in one SQLite file (created with its directories), or `":memory:"`."""

    def __init__(self, path: str | os.PathLike[str], *, checkpoint_interval: float = INTERVAL) -> None:
        self.path = path if path == MEMORY else Path(path)
        self._checkpoint_interval = checkpoint_interval
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

    async def apply(self, ops: Sequence[Op]) -> None:
        steps = plan(ops)
        if not steps:
            return
        async with self._write_lock:
            db = self._writes
            if db is None:
                raise StoreError(f"{self!r} is not open")
            if db is self._db:  # in memory: the one connection lives on the read thread
                await self._run(_apply, db, steps)
                return
            if _small(steps):
                try:
                    _apply(db, steps)
                    return
                except _Locked:
                    pass  # another process writes: wait for it on the thread
            future = asyncio.get_running_loop().run_in_executor(self._write_thread, _apply_waiting, db, steps)
            try:
                await asyncio.shield(future)
            except asyncio.CancelledError:
                # The thread still uses the connection: keep the lock until it is done with it.
                await asyncio.wait([future])
                raise

    async def get_conversation(self, owner: str, conversation_id: str) -> ConversationRecord | None:
        sql = f"{_CONVERSATION} WHERE id = ? AND owner = ?"
        rows = await self._fetch(sql, (conversation_id, owner))
        return ConversationRecord(*rows[0]) if rows else None

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
        sql = f"{_CONVERSATION} WHERE {' AND '.join(where)} ORDER BY {_NEWEST_FIRST} LIMIT ?"
        return [ConversationRecord(*row) for row in await self._fetch(sql, (*params, limit))]

    async def load_history(
        self, owner: str, conversation_id: str, history: History
    ) -> list[HistoryItem]:
        rows = await self._fetch(_HISTORY, (conversation_id, owner, history))
        return [_item(row) for row in rows]

    async def history_page(
        self, owner: str, conversation_id: str, history: History, before: str | None, limit: int
    ) -> HistoryPage | None:
        def page() -> HistoryPage | None:
            db = self._conn()
            end = 2**62  # after any position
            if before is not None:
                found = db.execute(_POSITION, (conversation_id, owner, history, before)).fetchone()
                if found is None:
                    return None
                end = found[0]
            # One more than asked says whether older items exist.
            rows = db.execute(_PAGE, (conversation_id, owner, history, end, limit + 1)).fetchall()
            return HistoryPage([_item(row) for row in reversed(rows[:limit])], more=len(rows) > limit)

        return await self._run(page)  # one job: both reads see the same state

    async def history_size(self, owner: str, conversation_id: str, history: History) -> HistorySize:
        rows = await self._fetch(_SIZE, (conversation_id, owner, history))
        return HistorySize(*rows[0])

    async def events_after(
        self, owner: str, conversation_id: str, after_seq: int, limit: int | None = None
    ) -> list[EventRecord]:
        # LIMIT -1 is SQLite's "no limit".
        params = (conversation_id, owner, after_seq, -1 if limit is None else limit)
        return [EventRecord(*row) for row in await self._fetch(_EVENTS, params)]

    async def running_turns(self, conversation_id: str | None = None) -> list[TurnRecord]:
        where, params = ("", ()) if conversation_id is None else (" AND conversation_id = ?", (conversation_id,))
        rows = await self._fetch(f"{_TURN} WHERE status = 'running'{where} ORDER BY started_at, id", params)
        return [_turn(row) for row in rows]

    async def get_turn(self, owner: str, turn_id: str) -> TurnRecord | None:
        rows = await self._fetch(f"{_TURN} WHERE id = ? AND owner = ?", (turn_id, owner))
        return _turn(rows[0]) if rows else None

    async def usage_totals(self, owner: str, conversation_id: str) -> dict[str, int]:
        rows = await self._fetch(_USAGE, (conversation_id, owner))
        return {key: int(total) for key, total in rows}

    async def has_client_message_id(
        self, owner: str, conversation_id: str, client_id: str
    ) -> bool:
        return bool(await self._fetch(_CLIENT_ID, (conversation_id, owner, client_id)))

    async def get_artifact(self, owner: str, conversation_id: str) -> ArtifactRecord | None:
        def read() -> ArtifactRecord | None:
            db = self._conn()
            row = db.execute(_ARTIFACT, (conversation_id, owner)).fetchone()
            if row is None:
                return None
            return ArtifactRecord(*row[:4], current=_version(db, conversation_id, row[4:]))

        return await self._run(read)

    async def get_artifact_version(
        self, owner: str, conversation_id: str, index: int
    ) -> ArtifactVersionRecord | None:
        def read() -> ArtifactVersionRecord | None:
            db = self._conn()
            row = db.execute(_ARTIFACT_VERSION, (conversation_id, owner, index)).fetchone()
            return None if row is None else _version(db, conversation_id, row)

        return await self._run(read)

    async def get_memories(self, owner: str) -> MemoriesRecord | None:
        rows = await self._fetch(_MEMORIES, (owner,))
        if not rows:
            return None
        style_rules, content, updated_at = rows[0]
        return MemoriesRecord(json.loads(style_rules), json.loads(content), updated_at)

    async def list_quick_actions(self, owner: str) -> list[QuickActionRecord]:
        rows = await self._fetch(f"{_QUICK_ACTION} ORDER BY created_at, id", (owner,))
        return [_quick_action(row) for row in rows]

    async def get_quick_action(self, owner: str, id: str) -> QuickActionRecord | None:
        rows = await self._fetch(f"{_QUICK_ACTION} AND id = ?", (owner, id))
        return _quick_action(rows[0]) if rows else None

    async def get_file(self, owner: str, file_id: str) -> FileRecord | None:
        rows = await self._fetch(_FILE, (file_id, owner))
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
        if self._thread is None:
            raise StoreError(f"{self!r} is not open")
        return await asyncio.get_running_loop().run_in_executor(self._thread, job, *args)

    async def _fetch(self, sql: str, params: Sequence[Any]) -> list[Any]:
        return await self._run(lambda: self._conn().execute(sql, params).fetchall())


def _version(db: sqlite3.Connection, conversation_id: str, row: Sequence[Any]) -> ArtifactVersionRecord:
    """A version row with its content resolved: a delta is applied to its base's content.
    Versions never change once written, so reading the chain after the row is consistent."""
    *fields, base_idx, changes = row
    version = ArtifactVersionRecord(*fields)
    if base_idx is not None:
        version.content = edits.apply(_content(db, conversation_id, base_idx), json.loads(changes))
    return version


def _content(db: sqlite3.Connection, conversation_id: str, index: int) -> str:
    chain = db.execute(_CHAIN, (conversation_id, index)).fetchall()
    if not chain or chain[-1][0] is not None:
        raise StoreError(f"artifact version {index} of {conversation_id} has no snapshot behind it")
    content = chain[-1][1]
    for _, _, changes in reversed(chain[:-1]):
        content = edits.apply(content, json.loads(changes))
    return content


def _item(row: Sequence[Any]) -> HistoryItem:
    id, data, tokens, chars = row
    return HistoryItem(id, json.loads(data), tokens, chars)


def _turn(row: Sequence[Any]) -> TurnRecord:
    *head, usage = row
    return TurnRecord(*head, usage=None if usage is None else json.loads(usage))


def _quick_action(row: Sequence[Any]) -> QuickActionRecord:
    id, owner, title, prompt, reflections, prefix, history, created_at, updated_at = row
    return QuickActionRecord(
        id, owner, title, prompt, bool(reflections), bool(prefix), bool(history),
        created_at, updated_at,
    )


class _Locked(Exception):
    """Another connection holds the write lock; nothing was written."""


def _small(steps: list[tuple[str, list[Any]]]) -> bool:
    if sum(len(rows) for _, rows in steps) > INLINE_ROWS:
        return False
    return sum(len(value) for _, rows in steps for row in rows for value in row if isinstance(value, str)) <= INLINE_CHARS


def _apply(db: sqlite3.Connection, steps: list[tuple[str, list[Any]]]) -> None:
    """The batch in one transaction. `_Locked` when the connection's busy timeout passed
    (at once on the write connection) with another one holding the write lock."""
    # IMMEDIATE: take the write lock up front so COMMIT cannot meet SQLITE_BUSY.
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            raise _Locked() from exc
        raise
    try:
        for sql, rows in steps:
            db.executemany(sql, rows)
        db.execute("COMMIT")
    except BaseException as exc:
        db.rollback()
        if isinstance(exc, sqlite3.IntegrityError):
            raise ConstraintError(str(exc)) from exc
        raise


def _apply_waiting(db: sqlite3.Connection, steps: list[tuple[str, list[Any]]]) -> None:
    """`_apply` on a thread, waiting up to the busy timeout for the write lock."""
    db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    try:
        try:
            _apply(db, steps)
        except _Locked as exc:
            raise exc.__cause__ from None  # the lock was not freed in time: a failed commit, retried
    finally:
        db.execute("PRAGMA busy_timeout = 0")
