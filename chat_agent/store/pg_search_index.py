"""PostgreSQL's search documents indexed after the commit that wrote them (pg_schema.py,
version 15): a document is written with `tsv` NULL, and this indexer makes its tsvector a few
documents at a time, off the writer's connection, so no frame waits for a message's text to
be parsed. A search reads a document still waiting as its text (postgres.py, `_SEARCH`).

Every instance runs one; they share the work without waiting on each other (`SKIP LOCKED`),
and one that finds the database unreachable tries again on its next round.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import psycopg

from chat_agent.store.base import StoreError

log = logging.getLogger(__name__)

INTERVAL = 0.5  # seconds between two looks for documents waiting
BATCH = 32  # documents per transaction: their rows stay locked that long (a 9 KB message ~1 ms)

# The documents are taken in no order: whichever waits is found through the partial index of
# those waiting. One changed again meanwhile is NULL again (its trigger) and taken again later.
_INDEX = (
    "UPDATE search_docs d SET tsv = to_tsvector('simple', d.body)"
    " FROM (SELECT conversation_id, message_id FROM search_docs WHERE tsv IS NULL"
    " LIMIT $1 FOR UPDATE SKIP LOCKED) w"
    " WHERE d.conversation_id = w.conversation_id AND d.message_id = w.message_id"
)


class SearchIndexer:
    def __init__(self, connection: Callable[[], AbstractAsyncContextManager[Any]], *,
                 interval: float = INTERVAL, batch: int = BATCH):
        self._connection = connection
        self._interval = interval
        self._batch = batch
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="search-indexer")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def index_waiting(self) -> int:
        """Indexes every document waiting now (batch by batch); how many it indexed."""
        done = 0
        while True:
            async with self._connection() as conn:
                cursor = await conn.execute(_INDEX, (self._batch,))
            done += cursor.rowcount
            if cursor.rowcount < self._batch:
                return done

    async def _run(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.index_waiting()
            except (StoreError, psycopg.Error) as exc:  # unreachable for now: the next round
                if not failing:
                    log.info("search documents wait to be indexed: %s", exc)
                failing = True
            else:
                failing = False
