"""The quota counters' contract, for every backend (memory, SQLite, PostgreSQL, Redis), with
two counter objects on one backend standing for two instances: a burst of takes at the same
moment grants exactly the rate, whatever order the takes reach the backend in; the bucket
comes back one unit per period/rate; holds never pass their limit."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from chat_agent.quotas.counters import Counters, Hold, MemoryCounters
from chat_agent.store import create_store
from tests.instances import redis_or_skip
from tests.pg import isolated_database

BACKENDS = ["memory", "sqlite", "postgresql", "redis"]


@asynccontextmanager
async def _two(make: Callable[[], Counters]) -> AsyncIterator[tuple[Counters, Counters]]:
    """Two counter objects on one backend, started, and closed afterwards."""
    first, second = make(), make()
    await first.start()
    await second.start()
    try:
        yield first, second
    finally:
        await first.close()
        await second.close()


@pytest.fixture(params=BACKENDS)
async def pair(request, tmp_path) -> AsyncIterator[tuple[Counters, Counters]]:
    kind = request.param
    if kind == "memory":
        one = MemoryCounters()
        yield one, one  # nothing shares it: one process, one object
        return
    if kind == "redis":
        from chat_agent.quotas.redis_counters import RedisCounters
        url = redis_or_skip()
        async with _two(lambda: RedisCounters(url)) as both:
            yield both
        return
    from chat_agent.quotas.sql import PostgresCounters, SqliteCounters
    if kind == "sqlite":
        async with create_store(None, tmp_path):  # its migrations make the tables
            pass
        async with _two(lambda: SqliteCounters(tmp_path / "chat-agent.db")) as both:
            yield both
        return
    with isolated_database() as url:
        async with create_store(url, tmp_path):
            pass
        async with _two(lambda: PostgresCounters(url)) as both:
            yield both


class Clock:
    """Real time plus a shift a test moves forward; every read is later than the one before."""

    def __init__(self) -> None:
        import time
        self._time = time.time
        self.shift = 0.0
        self._ticks = itertools.count()

    def __call__(self) -> float:
        return self._time() + self.shift + next(self._ticks) * 1e-6


async def test_a_burst_on_two_instances_grants_exactly_the_rate(pair):
    first, second = pair
    clock, owner = Clock(), uuid.uuid4().hex
    takes = [(first if i % 2 else second).take(owner, "turns_per_minute", 1, 4, 60.0, clock) for i in range(24)]
    taken = await asyncio.gather(*takes)
    assert sum(t.granted for t in taken) == 4
    refused = [t for t in taken if not t.granted]
    # The bucket is full a minute after the first take: room for one comes back 15 s later.
    assert all(t.tat - 60.0 - t.now == pytest.approx(0.0, abs=1.0) for t in refused)
    assert not (await first.take(owner, "turns_per_minute", 1, 4, 60.0, clock)).granted


# Redis judges by its own clock, which a test cannot move forward.
@pytest.mark.parametrize("pair", ["memory", "sqlite", "postgresql"], indirect=True)
async def test_units_come_back_one_per_period_over_rate(pair):
    first, second = pair
    clock, owner = Clock(), uuid.uuid4().hex
    for _ in range(4):
        assert (await first.take(owner, "uploads_per_minute", 1, 4, 60.0, clock)).granted
    assert not (await second.take(owner, "uploads_per_minute", 1, 4, 60.0, clock)).granted
    clock.shift = 15.5
    assert (await second.take(owner, "uploads_per_minute", 1, 4, 60.0, clock)).granted
    assert not (await first.take(owner, "uploads_per_minute", 1, 4, 60.0, clock)).granted
    # A take larger than the whole quota is never granted, and moves nothing.
    before = await first.tat(owner, "uploads_per_minute")
    assert not (await first.take(owner, "uploads_per_minute", 5, 4, 60.0, clock)).granted
    assert await first.tat(owner, "uploads_per_minute") == pytest.approx(before)


async def test_holds_never_pass_their_limit(pair):
    first, second = pair
    clock, owner = Clock(), uuid.uuid4().hex
    now = clock()
    holds = [Hold(owner, "sockets", uuid.uuid4().hex) for _ in range(12)]
    granted = await asyncio.gather(*((first if i % 2 else second).hold(h, 3, now, now + 60) for i, h in enumerate(holds)))
    assert sum(granted) == 3
    assert await first.held(owner, "sockets", now) == 3
    kept = [h for h, ok in zip(holds, granted) if ok]
    await second.release(kept[0])
    assert await first.held(owner, "sockets", now) == 2
    assert await second.hold(Hold(owner, "sockets", uuid.uuid4().hex), 3, now, now + 60)
    assert not await first.hold(Hold(owner, "sockets", uuid.uuid4().hex), 3, now, now + 60)
    # Expired holds count for nothing.
    assert await first.held(owner, "sockets", now + 61) == 0
