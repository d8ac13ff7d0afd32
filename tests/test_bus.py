"""The bus between instances, on the machine's real PostgreSQL and Redis: frames arrive in
order and whole (also past NOTIFY's 8000-byte limit), direct messages reach one instance,
deployments do not hear each other, and a lost listener connection comes back and says so."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from chat_agent.sessions.bus import Bus, PostgresBus, RedisBus, namespace_of
from chat_agent.sessions.messages import Answer, Command, Frames, Resync

PG_URL = os.environ.get("CHAT_AGENT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("CHAT_AGENT_TEST_REDIS", "redis://127.0.0.1:6379/0")
REQUIRED = os.environ.get("CHAT_AGENT_REQUIRE_SERVICES") == "1"


async def _pg_schema() -> str:
    import psycopg

    schema = "bus_" + uuid.uuid4().hex[:12]
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
    return schema


async def _drop_schema(schema: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def _service_or_skip(kind: str) -> None:
    try:
        if kind == "postgres":
            import psycopg

            async with await psycopg.AsyncConnection.connect(PG_URL, connect_timeout=3):
                pass
        else:
            import redis.asyncio as redis

            client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
            try:
                await client.ping()
            finally:
                await client.aclose()
    except Exception as exc:
        if REQUIRED:
            raise
        pytest.skip(f"{kind} is not reachable ({exc}); set CHAT_AGENT_REQUIRE_SERVICES=1 to fail instead")


class Inbox:
    """What one bus received, read from its `inbox` as the server reads it."""

    def __init__(self, bus: Bus) -> None:
        self.frames: list[tuple[str, list]] = []
        self.direct: list = []
        self.senders: set[str] = set()
        self.resyncs = 0
        self.changed = asyncio.Event()
        self.reader = asyncio.get_running_loop().create_task(self._read(bus))

    async def _read(self, bus: Bus) -> None:
        while True:
            message = await bus.inbox.get()
            if isinstance(message, Frames):
                self.frames.append((message.conversation, message.frames))
                self.senders.add(message.instance)
            elif isinstance(message, Resync):
                self.resyncs += 1
            else:
                self.direct.append(message)
            self.changed.set()

    async def until(self, check, timeout: float = 10.0) -> None:
        async def wait() -> None:
            while not check():
                self.changed.clear()
                await self.changed.wait()
        await asyncio.wait_for(wait(), timeout)

    def seqs(self, cid: str) -> list[int]:
        return [f[0] for c, frames in self.frames if c == cid for f in frames]


@pytest_asyncio.fixture(params=["postgres", "redis"])
async def make_bus(request) -> AsyncIterator:
    kind = request.param
    await _service_or_skip(kind)
    buses: list[Bus] = []
    inboxes: list[Inbox] = []
    schemas: list[str] = []
    deployment = uuid.uuid4().hex

    async def make(instance: str, *, other_deployment: bool = False) -> tuple[Bus, Inbox]:
        if kind == "postgres":
            if other_deployment or not schemas:
                schemas.append(await _pg_schema())
            schema = schemas[-1] if other_deployment else schemas[0]
            bus: Bus = PostgresBus(instance, f"{PG_URL}?options=-csearch_path%3D{schema}")
        else:
            name = deployment + ("-other" if other_deployment else "")
            bus = RedisBus(instance, REDIS_URL, namespace_of(name))
        await bus.start()
        inbox = Inbox(bus)
        buses.append(bus)
        inboxes.append(inbox)
        return bus, inbox

    make.kind = kind  # type: ignore[attr-defined]
    yield make
    for inbox in inboxes:
        inbox.reader.cancel()
    for bus in buses:
        await bus.close()
    for schema in schemas:
        await _drop_schema(schema)


async def test_frames_reach_every_instance_in_order_and_whole(make_bus) -> None:
    a, _ = await make_bus("a" * 16)
    b, inbox_b = await make_bus("b" * 16)
    _, inbox_c = await make_bus("c" * 16)
    big = "é€😀" * 20_000  # ~180 KB of multi-byte text: many NOTIFY pieces
    texts = {seq: f'{{"type":"content_chunk","seq":{seq},"content":"{big if seq == 7 else seq}"}}'
             for seq in range(1, 41)}
    for seq, text in texts.items():
        a.publish("conv1", (seq, "turn1", "content_chunk", text))
        if seq % 5 == 0:
            await asyncio.sleep(0)  # several flushes, not one
    a.publish("conv2", (1, None, "title", '{"type":"title"}'))
    for inbox in (inbox_b, inbox_c):
        await inbox.until(lambda inbox=inbox: len(inbox.seqs("conv1")) == 40 and inbox.seqs("conv2") == [1])
        assert inbox.seqs("conv1") == list(range(1, 41))
        got = {f[0]: tuple(f[1:]) for c, frames in inbox.frames if c == "conv1" for f in frames}
        assert got == {seq: ("turn1", "content_chunk", text) for seq, text in texts.items()}
        assert inbox.senders == {"a" * 16}  # who committed them: the conversation's owner
    del b


async def test_direct_messages_reach_only_their_instance(make_bus) -> None:
    a, inbox_a = await make_bus("a" * 16)
    _, inbox_b = await make_bus("b" * 16)
    _, inbox_c = await make_bus("c" * 16)
    long_edit = "x" * 50_000
    command = Command(id="r1", sender="a" * 16, conversation="conv1", user="alice",
                      frame={"type": "edit_artifact", "content": long_edit})
    await a.send("b" * 16, command)
    await inbox_b.until(lambda: len(inbox_b.direct) == 1)
    assert inbox_b.direct == [command]
    await asyncio.sleep(0.2)
    assert inbox_c.direct == [] and inbox_a.direct == []


async def test_another_deployment_hears_nothing(make_bus) -> None:
    a, _ = await make_bus("a" * 16)
    _, inbox_b = await make_bus("b" * 16)
    _, stranger = await make_bus("b" * 16, other_deployment=True)  # even with the same instance id
    a.publish("conv1", (1, None, "title", "{}"))
    await a.send("b" * 16, Answer(id="r1", status="ok"))
    await inbox_b.until(lambda: inbox_b.seqs("conv1") == [1] and len(inbox_b.direct) == 1)
    await asyncio.sleep(0.3)
    assert stranger.frames == [] and stranger.direct == []


async def test_a_lost_listener_comes_back_and_asks_for_a_resync(make_bus) -> None:
    a, _ = await make_bus("a" * 16)
    b, inbox_b = await make_bus("b" * 16)
    a.publish("conv1", (1, None, "title", "{}"))
    await inbox_b.until(lambda: inbox_b.seqs("conv1") == [1])
    await _kill_listeners(make_bus.kind, b)
    await inbox_b.until(lambda: inbox_b.resyncs == 1)
    a.publish("conv1", (2, None, "title", "{}"))
    await inbox_b.until(lambda: 2 in inbox_b.seqs("conv1"))


async def _kill_listeners(kind: str, bus: Bus) -> None:
    """Cuts the bus's listening connection from the server's side, as a restart or a network
    failure would."""
    if kind == "postgres":
        import psycopg

        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
            cursor = await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE %s AND pid <> pg_backend_pid()",
                (f'LISTEN "{bus.instance_channel(bus.instance)}"%',))
            assert (await cursor.fetchall()) == [(True,)]
    else:
        import redis.asyncio as redis

        client = redis.Redis.from_url(REDIS_URL)
        try:
            killed = await client.client_kill_filter(_type="pubsub", skipme=True)
            assert killed >= 1
        finally:
            await client.aclose()
