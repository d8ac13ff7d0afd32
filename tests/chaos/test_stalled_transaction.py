"""An owner stalled in the middle of a commit (SIGSTOP, swapped out) holds its transaction open,
and with it the share lock its fence check took on the lease rows: another instance's claim of
an expired lease waited on it for as long as the stall lasted (found by
test_owner_faults.py::test_sigstop_of_an_owner_past_its_lease: nothing taken over for 60 s).
PostgreSQL 15 ends no such session by itself (it waits for the rest of a pipeline, not idle in
a transaction). The claim now waits a little, then ends the session of the instance whose lease
expired, and takes the lease.

Real parts: the stalled commit is a second connection that ran the fence check and stopped.
"""

from __future__ import annotations

import asyncio

import psycopg
from psycopg import AsyncRawCursor

from chat_agent.store.pg_schema import CHECK_FENCES
from chat_agent.store.postgres import PostgresStore


async def test_a_claim_is_not_held_up_by_an_expired_owner_s_open_commit(pg_url):
    store = PostgresStore(pg_url)
    await store.open()
    stalled = await psycopg.AsyncConnection.connect(pg_url, cursor_factory=AsyncRawCursor)
    try:
        held = await store.claim_lease("c", "a", 1.0)
        assert held is not None
        await stalled.execute(CHECK_FENCES, (["c"], ["a"], [held.epoch]))  # a transaction, left open
        await asyncio.sleep(1.2)  # the lease expires; its owner's commit is still open
        taken = await asyncio.wait_for(store.claim_lease("c", "b", 10.0), 20)
        assert taken is not None and (taken.instance, taken.epoch) == ("b", held.epoch + 1)
        assert stalled.closed or stalled.broken or (await _dead(stalled))
    finally:
        await stalled.close()
        await store.close()


async def _dead(conn) -> bool:
    try:
        await conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return True
    return False
