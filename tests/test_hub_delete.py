"""Deleting a conversation while something opens it: the real hub, store and writer in this
process (SQLite), the model the demo one (no turn runs here)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from chat_agent.agent.loop import Agent
from chat_agent.config import Settings
from chat_agent.context.tokens import TokenCounter
from chat_agent.files.blobs import LocalBlobs
from chat_agent.files.catalog import Files
from chat_agent.model.demo import DemoModel
from chat_agent.sessions.hub import Hub
from chat_agent.store import StoreWriter
from chat_agent.store.sqlite import SqliteStore
from chat_agent.tooling import ToolRegistry


class Listener:
    def __init__(self) -> None:
        self.closed: list[int] = []

    def deliver(self, seq: int | None, text: str) -> None:
        pass

    def close(self, code: int, text: str | None = None) -> None:
        self.closed.append(code)


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[Hub]:
    settings = Settings(data_dir=tmp_path)
    store = SqliteStore(tmp_path / "chat.db")
    await store.open()
    writer = StoreWriter(store)
    writer.start()
    agent = Agent(DemoModel(), ToolRegistry(), settings)
    files = Files(store, writer, LocalBlobs(tmp_path), max_bytes=settings.upload_max_bytes)
    hub = Hub(settings, store, writer, agent, TokenCounter(), files)
    try:
        async with hub.running():
            yield hub
    finally:
        await writer.close()
        await store.close()


async def stored_conversation(hub: Hub) -> str:
    """A stored conversation nobody holds open any more (its socket went away)."""
    listener = Listener()
    live = await hub.registry.attach("alice", None, listener)
    assert live is not None
    live.store_now()
    await hub.writer.flush()
    hub.registry.detach(live, listener)
    assert hub.registry.get(live.id) is None
    return live.id


async def test_a_conversation_opened_while_it_is_deleted_is_not_found_and_stays_deleted(hub: Hub):
    conversation_id = await stored_conversation(hub)
    deleting = asyncio.create_task(hub.delete("alice", conversation_id))
    # What opens it meanwhile (a background job's attach, a socket) comes in at every point
    # of the delete up to its commit: it finds nothing, or what it found is closed.
    opened: list[tuple[Listener, asyncio.Task]] = []
    while not deleting.done():
        listener = Listener()
        opened.append((listener, asyncio.create_task(hub.registry.attach("alice", conversation_id, listener))))
        await asyncio.sleep(0)
    assert await deleting
    results = [(listener, await task) for listener, task in opened]
    assert len(results) > 3
    assert all(live is None or listener.closed for listener, live in results)
    assert results[-1][1] is None
    assert hub.registry.get(conversation_id) is None
    assert await hub.store.get_conversation("alice", conversation_id) is None
    assert not await hub.delete("alice", conversation_id)  # the second DELETE: 404


async def test_deleting_closes_the_sockets_of_a_conversation_held_open(hub: Hub):
    conversation_id = await stored_conversation(hub)
    listener = Listener()
    assert await hub.registry.attach("alice", conversation_id, listener) is not None
    assert not await hub.delete("bob", conversation_id)  # someone else's: not found, untouched
    assert await hub.delete("alice", conversation_id)
    assert listener.closed and hub.registry.get(conversation_id) is None
    assert not await hub.delete("alice", conversation_id)
