"""Quota counts in Redis (`CHAT_AGENT_REDIS_URL`): each step one Lua script, atomic on the
server. A bucket is a key holding `tat`, expiring once it is empty again; a user's holds of
one name are a sorted set of hold ids scored by their expiry."""

from __future__ import annotations

from typing import Any, Callable

import redis.asyncio as aioredis

from chat_agent.quotas.counters import Hold, Taken

# The server's clock: every instance's takes are judged on one clock, in the order they run.
_TAKE = """
local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
local step, period = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new = tat + step
if new - now > period then return {0, tostring(tat), tostring(now)} end
redis.call('SET', KEYS[1], tostring(new), 'PX', math.max(1, math.ceil((new - now) * 1000)))
return {1, tostring(new), tostring(now)}
"""
_HOLD = """
local now, expires, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= limit then return 0 end
redis.call('ZADD', KEYS[1], expires, ARGV[4])
redis.call('PEXPIREAT', KEYS[1], math.ceil(expires * 1000))
return 1
"""
SLACK = 1e-9


def _bucket(owner: str, name: str) -> str:
    return f"chat-agent:quota:bucket:{name}:{owner}"


def _holds(owner: str, name: str) -> str:
    return f"chat-agent:quota:holds:{name}:{owner}"


class RedisCounters:
    kind = "redis"

    def __init__(self, url: str) -> None:
        self.url = url
        self._redis: aioredis.Redis | None = None
        self._take: Any = None
        self._hold: Any = None

    async def start(self) -> None:
        self._redis = aioredis.Redis.from_url(self.url, decode_responses=True)
        await self._redis.ping()
        self._take = self._redis.register_script(_TAKE)
        self._hold = self._redis.register_script(_HOLD)

    async def close(self) -> None:
        if self._redis is not None:
            redis, self._redis = self._redis, None
            await redis.aclose()

    async def take(self, owner: str, name: str, amount: float, rate: int, period: float,
                   clock: Callable[[], float]) -> Taken:
        step = amount * period / rate
        granted, tat, now = await self._take(keys=[_bucket(owner, name)], args=[repr(step), repr(period + SLACK)])
        return Taken(bool(granted), float(tat), float(now))

    async def tat(self, owner: str, name: str) -> float | None:
        assert self._redis is not None
        value = await self._redis.get(_bucket(owner, name))
        return None if value is None else float(value)

    async def hold(self, hold: Hold, limit: int, now: float, expires_at: float) -> bool:
        granted = await self._hold(keys=[_holds(hold.owner, hold.name)],
                                   args=[repr(now), repr(expires_at), limit, hold.id])
        return bool(granted)

    async def renew(self, holds: list[Hold], expires_at: float) -> None:
        assert self._redis is not None
        if not holds:
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            for hold in holds:
                key = _holds(hold.owner, hold.name)
                pipe.zadd(key, {hold.id: expires_at}, xx=True)  # only while it is still there
                pipe.pexpireat(key, int(expires_at * 1000) + 1, gt=True)
            await pipe.execute()

    async def release(self, hold: Hold) -> None:
        assert self._redis is not None
        await self._redis.zrem(_holds(hold.owner, hold.name), hold.id)

    async def held(self, owner: str, name: str, now: float) -> int:
        assert self._redis is not None
        return int(await self._redis.zcount(_holds(owner, name), f"({now!r}", "+inf"))

    async def sweep(self, now: float) -> None:
        pass  # keys expire by themselves; a set's expired members go on its next `hold`
