"""A process stopped while a commit waits (SIGSTOP, a paused VM) says nothing of the store:
once it runs again, the commit ends as the store lets it, and the store is not taken as
unavailable (which would show the conversation's sockets frames before they are stored),
even when the stop began just after the commit did and ended just after the writer's
patience (STALLED) ran out. A real SQLite file, with a second connection holding its write
lock as another process would; the event loop blocked as a stopped process's is."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time

from chat_agent.store import AppendEvents, CreateConversation, EventRecord, StoreWriter
from chat_agent.store.sqlite import SqliteStore
from chat_agent.store.writer import STALLED

OWNER, CID = "u", "c1"


async def test_a_commit_held_over_a_stop_of_the_process_does_not_make_the_store_unavailable(tmp_path):
    store = SqliteStore(tmp_path / "chat.db")
    await store.open()
    writer = StoreWriter(store, retry_delay=0.05)
    writer.start()
    try:
        await writer.commit([CreateConversation(OWNER, CID, 1.0)])
        other = sqlite3.connect(tmp_path / "chat.db", check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # another process writes: the commit waits for its lock
        told = asyncio.Event()
        writer.submit([AppendEvents(OWNER, CID, (EventRecord(CID, 1, "content_chunk", None, "{}"),))], told.set)
        for _ in range(20):  # the commit has begun: it waits on the write thread
            await asyncio.sleep(0.01)
        # The lock goes a little before the process runs again, past STALLED in all.
        threading.Timer(STALLED + 0.2, other.rollback).start()
        time.sleep(STALLED + 0.5)  # the process stopped: nothing on the event loop runs
        await asyncio.wait_for(told.wait(), 10)
        assert writer.availability.empty(), "the store was taken as unavailable for the process's own stop"
        assert [e.seq for e in await store.events_after(OWNER, CID, 0)] == [1]
        other.close()
    finally:
        await writer.close()
        await store.close()
