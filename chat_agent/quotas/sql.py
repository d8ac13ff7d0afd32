"""Quota counts in the store's own database (tables of migration 8), on a connection of their
own so that a burst of sockets or uploads never queues behind the store's writes. Each `take`
and each `hold` is one transaction that reads and writes under a lock of the user's (SQLite:
the database's write lock; PostgreSQL: an advisory lock on the user and name); a take reads
the clock once it holds the lock, so takes are judged in the order they happen."""

from __future__ import annotations

import asyncio
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, TypeVar

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from chat_agent.quotas.counters import Hold, Taken, gcra
from chat_agent.store.pg_pool import SIDE_POOL, borrow

T = TypeVar("T")

_SET_TAT = ("INSERT INTO quota_buckets (owner, name, tat) VALUES ({p1}, {p2}, {p3})"
            " ON CONFLICT (owner, name) DO UPDATE SET tat = excluded.tat")
_TAT = "SELECT tat FROM quota_buckets WHERE owner = {p1} AND name = {p2}"
_HELD = "SELECT COUNT(*) FROM quota_holds WHERE owner = {p1} AND name = {p2} AND expires_at > {p3}"
_ADD_HOLD = "INSERT INTO quota_holds (id, owner, name, expires_at) VALUES ({p1}, {p2}, {p3}, {p4})"
_RELEASE = "DELETE FROM quota_holds WHERE id = {p1}"
_SWEEP_HOLDS = "DELETE FROM quota_holds WHERE expires_at <= {p1}"
_SWEEP_BUCKETS = "DELETE FROM quota_buckets WHERE tat <= {p1}"


def _sqlite(sql: str) -> str:
    return sql.format(p1="?1", p2="?2", p3="?3", p4="?4", p5="?5", max="MAX")


def _postgres(sql: str) -> str:
    return sql.format(p1="%(p1)s", p2="%(p2)s", p3="%(p3)s", p4="%(p4)s", p5="%(p5)s", max="GREATEST")


def _named(*values: Any) -> dict[str, Any]:
    return {f"p{i}": v for i, v in enumerate(values, 1)}


class SqliteCounters:
    kind = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._thread: ThreadPoolExecutor | None = None

    async def start(self) -> None:
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="quotas")
        self._db = await self._run(lambda: sqlite3.connect(self.path, timeout=5.0, isolation_level=None,
                                                           check_same_thread=False))

    async def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            await self._run(db.close)
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None

    async def _run(self, job: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, job)

    def _one(self, sql: str, *args: Any) -> Any:
        assert self._db is not None
        row = self._db.execute(_sqlite(sql), args).fetchone()
        return None if row is None else row[0]

    async def take(self, owner: str, name: str, amount: float, rate: int, period: float,
                   clock: Callable[[], float]) -> Taken:
        def job() -> Taken:
            assert self._db is not None
            self._db.execute("BEGIN IMMEDIATE")
            try:
                now = clock()
                granted, tat = gcra(self._one(_TAT, owner, name), amount, rate, period, now)
                if granted:
                    self._db.execute(_sqlite(_SET_TAT), (owner, name, tat))
                return Taken(granted, tat, now)
            finally:
                self._db.execute("COMMIT")
        return await self._run(job)

    async def tat(self, owner: str, name: str) -> float | None:
        return await self._run(lambda: self._one(_TAT, owner, name))

    async def hold(self, hold: Hold, limit: int, now: float, expires_at: float) -> bool:
        def job() -> bool:
            assert self._db is not None
            self._db.execute("BEGIN IMMEDIATE")  # every instance on this file waits its turn here
            try:
                if self._one(_HELD, hold.owner, hold.name, now) >= limit:
                    return False
                self._db.execute(_sqlite(_ADD_HOLD), (hold.id, hold.owner, hold.name, expires_at))
                return True
            finally:
                self._db.execute("COMMIT")
        return await self._run(job)

    async def renew(self, holds: list[Hold], expires_at: float) -> None:
        def job() -> None:
            assert self._db is not None
            self._db.executemany("UPDATE quota_holds SET expires_at = ? WHERE id = ?",
                                 [(expires_at, h.id) for h in holds])
        if holds:
            await self._run(job)

    async def release(self, hold: Hold) -> None:
        await self._run(lambda: self._one(_RELEASE, hold.id))

    async def held(self, owner: str, name: str, now: float) -> int:
        return int(await self._run(lambda: self._one(_HELD, owner, name, now)) or 0)

    async def sweep(self, now: float) -> None:
        await self._run(lambda: (self._one(_SWEEP_HOLDS, now), self._one(_SWEEP_BUCKETS, now)))


class PostgresCounters:
    kind = "postgresql"

    def __init__(self, url: str, pool_size: int = SIDE_POOL) -> None:
        self.url = url
        self._pool_size = pool_size
        self._pool: AsyncConnectionPool[AsyncConnection[Any]] | None = None

    async def start(self) -> None:
        self._pool = AsyncConnectionPool(self.url, min_size=1, max_size=self._pool_size, open=False,
                                         kwargs={"autocommit": True}, name="chat-agent-quotas")
        await self._pool.open(wait=True, timeout=30)

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def _one(self, sql: str, *args: Any) -> Any:
        assert self._pool is not None
        async with borrow(self._pool) as conn:
            cursor = await conn.execute(_postgres(sql), _named(*args))
            row = await cursor.fetchone() if cursor.description is not None else None
        return None if row is None else row[0]

    async def take(self, owner: str, name: str, amount: float, rate: int, period: float,
                   clock: Callable[[], float]) -> Taken:
        assert self._pool is not None
        async with borrow(self._pool) as conn, conn.transaction():
            await self._lock(conn, owner, name)
            row = await (await conn.execute(_postgres(_TAT), _named(owner, name))).fetchone()
            now = clock()
            granted, tat = gcra(None if row is None else float(row[0]), amount, rate, period, now)
            if granted:
                await conn.execute(_postgres(_SET_TAT), _named(owner, name, tat))
            return Taken(granted, tat, now)

    @staticmethod
    async def _lock(conn: AsyncConnection[Any], owner: str, name: str) -> None:
        """The user's lock for one name until the transaction ends: two instances reading the
        same count at once would both see room for one."""
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"quota:{owner}:{name}",))

    async def tat(self, owner: str, name: str) -> float | None:
        tat = await self._one(_TAT, owner, name)
        return None if tat is None else float(tat)

    async def hold(self, hold: Hold, limit: int, now: float, expires_at: float) -> bool:
        assert self._pool is not None
        async with borrow(self._pool) as conn, conn.transaction():
            await self._lock(conn, hold.owner, hold.name)
            row = await (await conn.execute(_postgres(_HELD), _named(hold.owner, hold.name, now))).fetchone()
            if row is not None and row[0] >= limit:
                return False
            await conn.execute(_postgres(_ADD_HOLD), _named(hold.id, hold.owner, hold.name, expires_at))
            return True

    async def renew(self, holds: list[Hold], expires_at: float) -> None:
        if holds:
            await self._one("UPDATE quota_holds SET expires_at = %(p1)s WHERE id = ANY(%(p2)s)",
                            expires_at, [h.id for h in holds])

    async def release(self, hold: Hold) -> None:
        await self._one(_RELEASE, hold.id)

    async def held(self, owner: str, name: str, now: float) -> int:
        return int(await self._one(_HELD, owner, name, now) or 0)

    async def sweep(self, now: float) -> None:
        await self._one(_SWEEP_HOLDS, now)
        await self._one(_SWEEP_BUCKETS, now)
