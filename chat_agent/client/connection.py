"""ChatClient: one WebSocket to `/api/chat-agent`, typed frames out and in, optional resume.

One reader task owns the socket's receiving side: it parses every frame, puts the
conversation's frames through a SeqOrderer (once each, in seq order) and queues them for
`frames()` / `receive()` / `run_turn()`, which share that one queue (one consumer at a time).
When the socket drops and `reconnect=True`, the reader reconnects with backoff, sends
`resume` with `afterSeq = last_seq`, and carries on; senders wait for it meanwhile.

A `session` frame is never yielded by `frames()`: the first one is `client.session` before
`connect()` returns, and the one each reconnect brings replaces `client.session` (its
history is already known to a consumer that saw the frames; `client.reconnects` counts them).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable
from urllib.parse import parse_qsl, urlencode, urlsplit

from pydantic import ValidationError
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI, WebSocketException

from chat_agent.protocol import (AbortIn, AnyServerFrame, ClearContextIn, ClientModel, EditArtifactIn,
                                 ErrorFrame, MessageIn, PingIn, ResumeIn, SelectArtifactVersionIn,
                                 SessionFrame, server_frames)

from .errors import ClientError, ConnectError, ConnectionLost, ProtocolMismatch
from .sequencer import SeqOrderer
from .turn import OnFrame, TurnDone, collect_turn

DEFAULT_URL = "ws://127.0.0.1:8000/api/chat-agent"
# Close codes after which reconnecting would only repeat the failure: protocol errors
# (ours to fix) and the server's own 4xxx refusals (auth, unknown conversation).
FATAL_CLOSE_CODES = frozenset({1002, 1003, 1007, 1008, 1010})
# Error frames instead of `session` that a retry could cure.
TRANSIENT_CONNECT_CODES = frozenset({"internal", "rate_limited"})

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _End:
    """Queued once the frame stream is over: `error` None means the user closed the client."""

    error: BaseException | None = None


def parse_frame(data: str | bytes) -> AnyServerFrame:
    if isinstance(data, bytes):
        raise ProtocolMismatch(f"server sent a binary frame ({len(data)} bytes); frames are JSON text")
    try:
        return server_frames.validate_json(data)
    except ValidationError as exc:
        raise ProtocolMismatch(f"server frame does not match chat_agent.protocol: {exc}\n"
                               f"frame: {data[:500]}") from exc


def encode(frame: ClientModel) -> str:
    # exclude_unset: only what the caller gave goes on the wire, so server defaults apply.
    return json.dumps(frame.model_dump(mode="json", exclude_unset=True))


def fatal_close(code: int) -> bool:
    return code >= 4000 or code in FATAL_CLOSE_CODES


def describe_close(exc: ConnectionClosed) -> tuple[int, str]:
    if exc.rcvd is None:
        return 1006, "connection dropped without a close frame"
    reason = f": {exc.rcvd.reason}" if exc.rcvd.reason else ""
    return exc.rcvd.code, f"close code {exc.rcvd.code}{reason}"


class ChatClient:
    def __init__(self, url: str = DEFAULT_URL, token: str | None = None,
                 conversation_id: str | None = None, *, reconnect: bool = False,
                 reconnect_timeout: float = 60.0, backoff: tuple[float, float] = (0.25, 8.0),
                 gap_timeout: float = 2.0, open_timeout: float = 10.0, max_size: int = 64 * 2**20,
                 on_status: Callable[[str], None] | None = None) -> None:
        self.url = url
        self.token = token
        self.conversation_id = conversation_id
        self.session: SessionFrame | None = None
        self.reconnects = 0
        self._reconnect = reconnect
        self._reconnect_timeout = reconnect_timeout
        self._backoff = backoff
        self._open_timeout = open_timeout
        self._max_size = max_size
        self._on_status = on_status or log.info
        self._order: SeqOrderer[AnyServerFrame] = SeqOrderer(gap_timeout=gap_timeout)
        self._queue: asyncio.Queue[AnyServerFrame | _End] = asyncio.Queue()
        self._connected = asyncio.Event()
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._failure: ClientError | None = None
        self._closing = False

    @property
    def last_seq(self) -> int:
        """The highest seq delivered in order (or covered by the first session snapshot)."""
        return self._order.last_seq

    @property
    def gaps(self) -> list[tuple[int, int]]:
        """Seq ranges the server could no longer replay after a reconnect (normally empty)."""
        return self._order.gaps

    async def __aenter__(self) -> ChatClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ---- lifecycle --------------------------------------------------------------------

    async def connect(self) -> SessionFrame:
        """Open the socket and read `session`. Raises ConnectError (never retried here)."""
        session = await self._open()
        self._order.last_seq = session.seq or 0
        if session.running:
            # Whether a new connection gets a running turn's live frames without `resume`
            # is not fixed by PROTOCOL.md; asking costs nothing and duplicates are dropped.
            await self._send_on(self._require_ws(), ResumeIn(type="resume", after_seq=self.last_seq))
        self._connected.set()
        self._reader = asyncio.create_task(self._read_loop(), name="chat-agent-client-reader")
        return session

    async def close(self) -> None:
        self._closing = True
        self._connected.clear()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._ws is not None:
            await self._ws.close()
        self._queue.put_nowait(_End())

    async def _open(self) -> SessionFrame:
        try:
            ws = await connect(self._full_url(), compression=None, max_size=self._max_size,
                               additional_headers=self._headers(), open_timeout=self._open_timeout)
        except InvalidStatus as exc:
            status = exc.response.status_code
            raise ConnectError(f"{self.url} refused the connection: HTTP {status}",
                               transient=status >= 500) from exc
        except InvalidURI as exc:
            raise ConnectError(f"not a WebSocket URL: {self.url}") from exc
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise ConnectError(f"cannot connect to {self.url}: {exc or type(exc).__name__}",
                               transient=True) from exc
        try:
            session = await self._first_frame(ws)
        except BaseException:
            await ws.close()
            raise
        self._ws, self.session, self.conversation_id = ws, session, session.conversation_id
        return session

    async def _first_frame(self, ws: ClientConnection) -> SessionFrame:
        try:
            async with asyncio.timeout(self._open_timeout):
                frame = parse_frame(await ws.recv())
        except TimeoutError:
            raise ConnectError(f"{self.url} sent no session frame", transient=True) from None
        except ConnectionClosed as exc:
            code, why = describe_close(exc)
            raise ConnectError(f"{self.url} closed the connection ({why})",
                               transient=not fatal_close(code)) from exc
        if isinstance(frame, ErrorFrame):
            raise ConnectError(f"{frame.code}: {frame.message}", code=frame.code,
                               transient=frame.code in TRANSIENT_CONNECT_CODES)
        if not isinstance(frame, SessionFrame):
            raise ProtocolMismatch(f"first frame was {frame.type!r}, PROTOCOL.md says session")
        return frame

    def _full_url(self) -> str:
        parts = urlsplit(self.url)
        query = parse_qsl(parts.query)
        if self.conversation_id:
            query.append(("conversationId", self.conversation_id))
        if self.token:
            query.append(("token", self.token))
        return parts._replace(query=urlencode(query)).geturl()

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    # ---- receiving --------------------------------------------------------------------

    async def _read_loop(self) -> None:
        try:
            while True:
                closed = await self._pump(self._require_ws())
                if self._closing:
                    return
                self._connected.clear()
                code, why = describe_close(closed)
                if not self._reconnect or fatal_close(code):
                    raise ConnectionLost(f"connection to {self.url} closed ({why})")
                await self._reconnect_after(why)
        except Exception as exc:  # handed to the consumer, who raises it
            self._failure = exc if isinstance(exc, ClientError) else ConnectionLost(repr(exc))
            self._queue.put_nowait(_End(exc))

    async def _pump(self, ws: ClientConnection) -> ConnectionClosed:
        """Read frames until the socket closes; returns how it closed."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                async with asyncio.timeout_at(self._order.deadline()):
                    data = await ws.recv()
            except TimeoutError:  # a seq gap outlived gap_timeout: the server no longer has it
                self._deliver(self._order.expire(loop.time()))
                first, last = self._order.gaps[-1]
                self._on_status(f"events {first}..{last} could not be replayed; continuing without them")
                continue
            except ConnectionClosed as exc:
                return exc
            frame = parse_frame(data)
            if isinstance(frame, SessionFrame):
                self.session = frame
            else:
                self._deliver(self._order.push(frame, loop.time()))

    def _deliver(self, frames: list[AnyServerFrame]) -> None:
        for frame in frames:
            self._queue.put_nowait(frame)

    async def _reconnect_after(self, why: str) -> None:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._reconnect_timeout
        delay, cap = self._backoff
        while (remaining := give_up - loop.time()) > 0:
            self._on_status(f"connection lost ({why}); reconnecting in {min(delay, remaining):.1f} s")
            await asyncio.sleep(min(delay, remaining))
            try:
                await self._open()
            except ConnectError as exc:
                if not exc.transient:
                    raise ConnectionLost(f"reconnecting was refused: {exc}") from exc
                why, delay = str(exc), min(delay * 2, cap)
                continue
            self.reconnects += 1
            # A failed send shows up as the next recv's ConnectionClosed: reconnect again then.
            with contextlib.suppress(ConnectionClosed):
                await self._send_on(self._require_ws(), ResumeIn(type="resume", after_seq=self.last_seq))
            self._connected.set()
            self._on_status(f"reconnected; resuming after seq {self.last_seq}")
            return
        raise ConnectionLost(f"gave up reconnecting to {self.url} after "
                             f"{self._reconnect_timeout:g} s ({why})")

    async def receive(self, timeout: float | None = None) -> AnyServerFrame:
        """The next frame. Raises TimeoutError, or the ClientError that ended the stream."""
        async with asyncio.timeout(timeout):
            item = await self._queue.get()
        if isinstance(item, _End):
            self._queue.put_nowait(item)  # every later call ends the same way
            raise item.error or ConnectionLost("the client was closed")
        return item

    async def frames(self) -> AsyncIterator[AnyServerFrame]:
        """Every server frame but `session`, forever; ends when `close()` is called."""
        while True:
            item = await self._queue.get()
            if isinstance(item, _End):
                self._queue.put_nowait(item)
                if item.error is not None:
                    raise item.error
                return
            yield item

    # ---- sending ----------------------------------------------------------------------

    async def send(self, frame: ClientModel) -> None:
        """Send a client frame. With `reconnect`, waits out a reconnect and sends again: the
        frame may then arrive twice, which is why `send_message` always sets `id`."""
        text = encode(frame)
        while True:
            ws = await self._usable_ws()
            try:
                await ws.send(text)
                return
            except ConnectionClosed as exc:
                if not self._reconnect:
                    raise ConnectionLost(f"connection to {self.url} closed ({describe_close(exc)[1]})") from exc
                if self._ws is ws:  # the reader has not noticed yet; wait for its reconnect
                    self._connected.clear()

    async def send_raw(self, text: str) -> None:
        """Send text as is, valid or not (for tests of the server's input checks)."""
        await (await self._usable_ws()).send(text)

    async def send_message(self, content: str, settings: dict[str, Any] | None = None,
                           client_id: str | None = None, *, attachments: list[dict[str, Any]] | None = None,
                           canvas: dict[str, Any] | None = None) -> str:
        """Start a turn. Returns the message's client id (generated when not given)."""
        client_id = client_id or uuid.uuid4().hex
        optional = {"settings": settings, "attachments": attachments, "canvas": canvas}
        await self.send(MessageIn(type="message", content=content, id=client_id,
                                  **{k: v for k, v in optional.items() if v is not None}))
        return client_id

    async def run_turn(self, content: str, settings: dict[str, Any] | None = None, *,
                       on_frame: OnFrame | None = None, timeout: float | None = None,
                       error_grace: float = 10.0, client_id: str | None = None,
                       attachments: list[dict[str, Any]] | None = None,
                       canvas: dict[str, Any] | None = None) -> TurnDone:
        """Send a message and read its frames up to `done` (see turn.collect_turn).

        Assumes no other turn is running and earlier turns' frames were read: the first
        `done` that arrives is taken as this turn's.
        """
        async with asyncio.timeout(timeout):
            await self.send_message(content, settings, client_id, attachments=attachments, canvas=canvas)
            return await collect_turn(self.receive, on_frame, error_grace)

    async def abort(self) -> None:
        await self.send(AbortIn(type="abort"))

    async def clear_context(self) -> None:
        await self.send(ClearContextIn(type="clear_context"))

    async def ping(self) -> None:
        await self.send(PingIn(type="ping"))

    async def select_artifact_version(self, index: int) -> None:
        await self.send(SelectArtifactVersionIn(type="select_artifact_version", index=index))

    async def edit_artifact(self, content: str, title: str | None = None) -> None:
        extra = {"title": title} if title is not None else {}
        await self.send(EditArtifactIn(type="edit_artifact", content=content, **extra))

    async def resume(self, after_seq: int) -> None:
        """Ask for a replay of every frame after `after_seq`. Rewinds the de-duplication to
        `after_seq`, so the replayed frames are delivered again, in order."""
        loop = asyncio.get_running_loop()
        self._deliver(self._order.rewind(after_seq, loop.time()))
        await self.send(ResumeIn(type="resume", after_seq=after_seq))

    async def _usable_ws(self) -> ClientConnection:
        while not self._connected.is_set():
            if self._closing or self._reader is None or self._reader.done():
                raise self._failure or ConnectionLost("the client is not connected")
            waiter = asyncio.ensure_future(self._connected.wait())
            try:
                await asyncio.wait({waiter, self._reader}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
        return self._require_ws()

    async def _send_on(self, ws: ClientConnection, frame: ClientModel) -> None:
        await ws.send(encode(frame))

    def _require_ws(self) -> ClientConnection:
        if self._ws is None:
            raise ConnectionLost("the client is not connected")
        return self._ws
