"""Per-user quotas: `Quotas` (quotas.py) over the counters every instance shares."""

from __future__ import annotations

from chat_agent.config import Settings
from chat_agent.quotas.counters import Counters, MemoryCounters
from chat_agent.quotas.quotas import QuotaExceeded, Quotas, SocketHold
from chat_agent.store import Store
from chat_agent.store.pg_pool import side_pool_size

__all__ = ["QuotaExceeded", "Quotas", "SocketHold", "create_quotas"]


def create_quotas(settings: Settings, store: Store) -> Quotas:
    """Counted in Redis when it carries the instances' messages, else in the store's database
    (in memory for an in-memory store, which no other instance can share anyway)."""
    return Quotas(settings.limits, _counters(settings, store), store)


def _counters(settings: Settings, store: Store) -> Counters:
    if not any(value is not None for _, value in settings.limits.items()):
        return MemoryCounters()  # nothing to count: no connection of its own
    if settings.redis_url:
        from chat_agent.quotas.redis_counters import RedisCounters
        return RedisCounters(settings.redis_url)
    path = getattr(store, "path", None)
    if store.kind == "postgresql":
        from chat_agent.quotas.sql import PostgresCounters
        return PostgresCounters(store.url, side_pool_size(store.pool_size))  # type: ignore[attr-defined]
    if store.kind == "sqlite" and path is not None and str(path) != ":memory:":
        from chat_agent.quotas.sql import SqliteCounters
        return SqliteCounters(path)
    return MemoryCounters()
