"""Messages between instances of the server, over PostgreSQL's LISTEN/NOTIFY or Redis pub/sub.

Two kinds travel (typed: see `messages`):
- broadcasts: the owner of a conversation publishes every frame once the store has it, on
  one channel all instances listen to; each delivers them to its own sockets on that
  conversation. A frame that is lost on the way (a dropped listener connection) is read
  back from the event log: a receiver notices the gap in `seq`. Deletions and live status
  travel there too.
- direct messages to one instance: commands forwarded to a conversation's owner, and the
  owner's replies.

What arrives waits in `inbox`, in order, for whoever serves this instance.

Publishing never waits: frames queue and a flusher sends what queued meanwhile in one
round trip, in the order they were published. A single instance with no bus configured
uses `LocalBus`, which sends nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chat_agent.sessions.messages import (Answer, Arrival, Committed, Deleted, Frames, Request, Resync, Status,
                                          bus_messages)

log = logging.getLogger(__name__)

RECONNECT_DELAY = 0.5  # seconds before a lost connection is opened again
UNSENT = 10_000  # frames kept to publish again while the bus is unreachable

def namespace_of(name: str) -> str:
    """A short channel prefix for one deployment: instances sharing a database (PostgreSQL
    channels are per database, not per schema) or a Redis must not hear other deployments."""
    return "ca" + hashlib.sha1(name.encode()).hexdigest()[:10]


class Bus(ABC):
    """One instance's end of the bus. `start` before use, `close` after."""

    kind = "none"  # what `GET /health` says carries frames between instances

    def __init__(self, instance: str, namespace: str = "ca"):
        self.instance = instance
        self.namespace = namespace
        self.inbox: asyncio.Queue[Arrival] = asyncio.Queue()
        self._pending: dict[str, list[Committed]] = {}
        self._broadcasts: list[str] = []  # deletions: sent after the frames queued before them
        # Live status, sent ahead of the frames queued with it: a status is told before its
        # turn's `done` is even published, so it must not reach anyone after that `done`.
        self._statuses: list[str] = []
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None

    @property
    def shared(self) -> bool:
        """Whether other instances can hear this one (False for `LocalBus`)."""
        return True

    @property
    def frames_channel(self) -> str:
        return f"{self.namespace}_frames"

    def instance_channel(self, instance: str) -> str:
        return f"{self.namespace}_i_{instance}"

    async def start(self) -> None:
        await self._listen()
        self._flusher = asyncio.get_running_loop().create_task(self._flush_loop(), name="bus-flush")

    async def close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
            self._flusher = None
        await self._stop()

    def publish(self, conversation_id: str, frame: Committed) -> None:
        """Queues a committed frame for every instance; returns at once."""
        self._pending.setdefault(conversation_id, []).append(frame)
        self._wake.set()

    def broadcast(self, message: Deleted | Status) -> None:
        """Queues a message for every instance: a deletion after the frames queued so far, a
        status before them."""
        (self._statuses if isinstance(message, Status) else self._broadcasts).append(message.model_dump_json())
        self._wake.set()

    async def send(self, instance: str, message: Request | Answer) -> None:
        """Sends a message to one instance (it may no longer be there: nothing says so)."""
        await self._send([(self.instance_channel(instance), message.model_dump_json())], direct=True)

    async def _flush_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            pending, self._pending = self._pending, {}
            broadcasts, self._broadcasts = self._broadcasts, []
            statuses, self._statuses = self._statuses, []  # not sent again if this fails: stale by then
            messages = [(self.frames_channel, text) for text in statuses]
            messages += [(self.frames_channel, _frames(cid, self.instance, frames)) for cid, frames in pending.items()]
            messages += [(self.frames_channel, text) for text in broadcasts]
            try:
                await self._send(messages)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Committed frames, so they go again once the bus answers (receivers drop the
                # seqs they have); past UNSENT they are left to the receivers' resync.
                unsent = sum(len(f) for f in pending.values())
                log.warning("could not publish %d frames to other instances: %s", unsent, exc)
                if unsent + sum(len(f) for f in self._pending.values()) <= UNSENT:
                    for cid, frames in self._pending.items():
                        pending.setdefault(cid, []).extend(frames)
                    self._pending, self._broadcasts = pending, broadcasts + self._broadcasts
                await asyncio.sleep(RECONNECT_DELAY)
                self._wake.set()

    def _received(self, channel: str, payload: str) -> None:
        try:
            message = bus_messages.validate_json(payload)
        except Exception:
            log.exception("could not read a message from another instance on %s", channel)
            return
        if isinstance(message, Frames) and message.instance == self.instance:
            return  # our own frames, back from the shared channel
        self.inbox.put_nowait(message)

    def _resynced(self) -> None:
        self.inbox.put_nowait(Resync())

    @abstractmethod
    async def _listen(self) -> None:
        """Starts listening on the frames channel and this instance's own one; returns once
        listening (what is published from then on arrives)."""

    @abstractmethod
    async def _stop(self) -> None: ...

    @abstractmethod
    async def _send(self, messages: list[tuple[str, str]], direct: bool = False) -> None:
        """Sends (channel, payload) pairs in order, in one round trip where the service allows.
        `direct`: a message to one instance (a command, an answer), which need not keep its
        order with the frames."""


class LocalBus(Bus):
    """One instance alone: nothing to tell anyone."""

    @property
    def shared(self) -> bool:
        return False

    def publish(self, conversation_id: str, frame: Committed) -> None:
        pass

    def broadcast(self, message: Deleted | Status) -> None:
        pass

    async def _listen(self) -> None:
        pass

    async def _stop(self) -> None:
        pass

    async def _send(self, messages: list[tuple[str, str]], direct: bool = False) -> None:
        if messages:
            raise RuntimeError("no other instance can be reached: no bus is configured")


# ---- PostgreSQL ------------------------------------------------------------------------------

# NOTIFY takes payloads shorter than 8000 bytes; longer ones travel in numbered pieces, all
# sent in one transaction (delivered together and in order), joined again on arrival.
PIECE_BYTES = 7000


@dataclass
class _Pieces:
    count: int
    parts: dict[int, str] = field(default_factory=dict)


class PostgresBus(Bus):
    """The namespace is the database and schema the URL leads to, as the server sees them."""

    kind = "postgresql"

    def __init__(self, instance: str, url: str):
        super().__init__(instance)
        self._url = url
        # Frames go out on one connection, one statement at a time (their order is kept);
        # commands and answers on another, so an `abort` never waits behind a flush of frames.
        self._senders = {False: _Sender(self._connect), True: _Sender(self._connect)}
        self._listener: asyncio.Task[None] | None = None
        self._pieces: dict[str, _Pieces] = {}

    async def _connect(self) -> Any:
        import psycopg  # imported here: a server without PostgreSQL does not need it

        return await psycopg.AsyncConnection.connect(self._url, autocommit=True)

    async def _listen(self) -> None:
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._listener = asyncio.get_running_loop().create_task(self._listen_loop(ready), name="bus-listen")
        await ready

    async def _listen_loop(self, ready: asyncio.Future[None]) -> None:
        first = True
        while True:
            try:
                conn = await self._connect()
                try:
                    if first:
                        cursor = await conn.execute("SELECT current_database() || '.' || current_schema()")
                        self.namespace = namespace_of(str((await cursor.fetchone())[0]))
                    for channel in (self.frames_channel, self.instance_channel(self.instance)):
                        await conn.execute(f'LISTEN "{channel}"')
                    if first:
                        ready.set_result(None)
                        first = False
                    else:
                        self._resynced()
                    async for notify in conn.notifies():
                        self._arrived(notify.channel, notify.payload)
                finally:
                    await conn.close()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if first:
                    ready.set_exception(exc)
                    return
                log.warning("lost the PostgreSQL bus connection (%s); reconnecting", exc)
                await asyncio.sleep(RECONNECT_DELAY)

    def _arrived(self, channel: str, payload: str) -> None:
        if not payload.startswith("~"):
            self._received(channel, payload)
            return
        key, index, count, piece = payload[1:].split(":", 3)
        pieces = self._pieces.setdefault(key, _Pieces(int(count)))
        pieces.parts[int(index)] = piece
        if len(pieces.parts) == pieces.count:
            del self._pieces[key]
            self._received(channel, "".join(pieces.parts[i] for i in range(pieces.count)))

    async def _stop(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
            self._listener = None
        for sender in self._senders.values():
            await sender.close()

    async def _send(self, messages: list[tuple[str, str]], direct: bool = False) -> None:
        channels, payloads = [], []
        for channel, payload in messages:
            for piece in _pieces(payload):
                channels.append(channel)
                payloads.append(piece)
        if channels:
            await self._senders[direct].notify(channels, payloads)


class _Sender:
    """One connection that sends notifications, one statement at a time."""

    def __init__(self, connect: Callable[[], Any]):
        self._connect = connect
        self._conn: Any = None  # psycopg.AsyncConnection
        self._lock = asyncio.Lock()

    async def notify(self, channels: list[str], payloads: list[str]) -> None:
        async with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = await self._connect()
            try:
                # One statement, so one transaction: its notifications arrive together, in order.
                # The arrays go out binary (%b): as text, psycopg would escape every quote of
                # every payload (JSON) in Python, ~1,700 times slower.
                await self._conn.execute(
                    "SELECT pg_notify(c, p) FROM unnest(%b::text[], %b::text[]) WITH ORDINALITY AS m(c, p, i)"
                    " ORDER BY i", (channels, payloads))
            except Exception:
                await self._conn.close()
                self._conn = None
                raise

    async def close(self) -> None:
        async with self._lock:
            if self._conn is not None:
                await self._conn.close()
                self._conn = None


def _pieces(payload: str) -> list[str]:
    data = payload.encode()
    if len(data) < PIECE_BYTES:
        return [payload]
    # Cut between characters (never before a UTF-8 continuation byte), so that every piece
    # is valid text on its own; on the bytes, not character by character (a frames message
    # of a burst is tens of KB).
    pieces, start, size = [], 0, PIECE_BYTES - 64
    while start < len(data):
        end = min(start + size, len(data))
        while end < len(data) and data[end] & 0xC0 == 0x80:
            end -= 1
        pieces.append(data[start:end].decode())
        start = end
    key = uuid.uuid4().hex[:12]
    return [f"~{key}:{i}:{len(pieces)}:{piece}" for i, piece in enumerate(pieces)]


# ---- Redis -----------------------------------------------------------------------------------

class RedisBus(Bus):
    """The namespace is given: the deployment's database, by default (see `create_bus`)."""

    kind = "redis"

    def __init__(self, instance: str, url: str, namespace: str):
        super().__init__(instance, namespace)
        self._url = url
        self._client: Any = None  # redis.asyncio.Redis
        self._listener: asyncio.Task[None] | None = None

    async def _listen(self) -> None:
        import redis.asyncio as redis  # imported here: a server without Redis does not need it

        self._client = redis.Redis.from_url(self._url)
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._listener = asyncio.get_running_loop().create_task(self._listen_loop(ready), name="bus-listen")
        await ready

    async def _listen_loop(self, ready: asyncio.Future[None]) -> None:
        first = True
        while True:
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.frames_channel, self.instance_channel(self.instance))
                if first:
                    ready.set_result(None)
                    first = False
                else:
                    self._resynced()
                while True:
                    message = await pubsub.get_message(timeout=None)
                    if message is not None and message["type"] == "message":
                        self._received(message["channel"].decode(), message["data"].decode())
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if first:
                    ready.set_exception(exc)
                    return
                log.warning("lost the Redis bus connection (%s); reconnecting", exc)
                await asyncio.sleep(RECONNECT_DELAY)
            finally:
                await pubsub.aclose()

    async def _stop(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
            self._listener = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _send(self, messages: list[tuple[str, str]], direct: bool = False) -> None:
        if not messages:
            return
        async with self._client.pipeline(transaction=False) as pipe:
            for channel, payload in messages:
                pipe.publish(channel, payload)
            await pipe.execute()


def _frames(conversation_id: str, instance: str, frames: list[Committed]) -> str:
    """A `Frames` message as JSON, written directly: it carries every frame of every turn."""
    return json.dumps({"kind": "frames", "conversation": conversation_id, "instance": instance, "frames": frames},
                      separators=(",", ":"), ensure_ascii=False)


def create_bus(instance: str, database_url: str | None, redis_url: str | None) -> Bus:
    """Redis when configured, else PostgreSQL's LISTEN/NOTIFY when the store is PostgreSQL,
    else nothing to share (one instance on SQLite)."""
    if redis_url:
        return RedisBus(instance, redis_url, namespace_of(database_url or "sqlite"))
    scheme = (database_url or "").partition(":")[0].lower()
    if scheme.startswith("postgres"):
        return PostgresBus(instance, database_url)  # type: ignore[arg-type]
    return LocalBus(instance)
