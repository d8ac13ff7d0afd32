"""A commit whose answer is lost (the connection fails after the database committed, before
the writer hears so) is in doubt, not failed: writing it again would break the event log's
unique seq and lose the conversation's writes (found under a 5 s PostgreSQL cut: 10 of 30
conversations evicted, their streamed frames renumbered). The group-commit writer reads one
of its events back and, found, does not write it again.

Real parts: PostgreSQL behind the test's TCP proxy, which lets the transaction through and
resets the connection as its answer arrives.
"""

from __future__ import annotations

import asyncio

from chat_agent.store import AppendEvents, CreateConversation, EventRecord, StoreWriter
from chat_agent.store.postgres import PostgresStore
from tests.chaos.proxy import PgProxy

OWNER = "u"


def events(cid: str, *seqs: int) -> AppendEvents:
    return AppendEvents(OWNER, cid, tuple(EventRecord(cid, s, "pong", None, f'{{"n":{s}}}') for s in seqs))


async def test_a_commit_whose_answer_is_lost_is_stored_once_and_told(pg_url):
    with PgProxy() as proxy:
        store = PostgresStore(proxy.url(pg_url))
        await store.open()
        writer = StoreWriter(store, retry_delay=0.05)
        writer.start()
        try:
            await writer.commit([CreateConversation(OWNER, "c", 1.0)])
            told: list[int] = []
            proxy.lose_answer(b"COMMIT")  # of the transaction that writes seq 1
            writer.submit([events("c", 1)], lambda: told.append(1))
            await asyncio.wait_for(writer.flush(), 30)
            assert proxy.answers_lost == 1
            writer.submit([events("c", 2)], lambda: told.append(2))
            await asyncio.wait_for(writer.flush(), 30)
            assert told == [1, 2] and writer.losses.empty() and not writer.lost("c")
            assert [e.seq for e in await store.events_after(OWNER, "c", 0)] == [1, 2]
        finally:
            await writer.close()
            await store.close()


async def test_a_commit_that_lands_after_it_was_looked_for_is_not_written_twice(pg_url):
    """The connection fails with the COMMIT still on its way: the writer looks for the commit
    (not there yet), tries again, and meets the rows the first transaction holds; once that
    commits, the writer's second try breaks the unique seq. It looks again: found, stored."""
    with PgProxy() as proxy:
        store = PostgresStore(proxy.url(pg_url))
        await store.open()
        writer = StoreWriter(store, retry_delay=0.05)
        writer.start()
        try:
            await writer.commit([CreateConversation(OWNER, "c", 1.0)])
            told: list[int] = []
            proxy.late_commit(hold=2.0)
            writer.submit([events("c", 1)], lambda: told.append(1))
            await asyncio.wait_for(writer.flush(), 30)
            writer.submit([events("c", 2)], lambda: told.append(2))
            await asyncio.wait_for(writer.flush(), 30)
            assert told == [1, 2] and writer.losses.empty() and not writer.lost("c")
            assert [e.seq for e in await store.events_after(OWNER, "c", 0)] == [1, 2]
        finally:
            await writer.close()
            await store.close()
