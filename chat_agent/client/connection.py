"""ChatClient: one WebSocket to `/api/chat-agent`, typed frames out and in, optional resume.

One reader task owns the socket's receiving side: it parses every frame, puts the
conversation's frames through a SeqOrderer (once each, in seq order) and queues them for
`frames()` / `receive()` / `run_turn()`, which share that one queue (one consumer at a time).
When the socket drops and `reconnect=True`, the reader reconnects with backoff, sends
`resume` with `afterSeq = last_seq`, and carries on; senders wait for it meanwhile.

A `session` frame is never yielded by `frames()`: the first one is `client.session` before
`connect()` returns, and the one each reconnect brings replaces `client.session` (its
history is already known to a consumer that saw the frames; `client.reconnects` counts them).
`client.artifact` follows the artifact through `session`, `artifact` and `artifact_edit`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from chat_agent.protocol import (AbortIn, AnyServerFrame, ApproveIn, ArtifactState, ClearContextIn, ClientModel,
                                 EditArtifactIn, MessageIn, PingIn, RegenerateIn, ResumeIn, ReviewDecisionIn,
                                 SelectArtifactVersionIn, SessionFrame, SwitchBranchIn)

from .artifact import ArtifactView
from .errors import ClientError, ConnectError, ConnectionLost
from .sequencer import SeqOrderer
from .turn import OnFrame, TurnDone, collect_turn
from .wire import describe_close, encode, fatal_close, open_session, parse_frame

DEFAULT_URL = "ws://127.0.0.1:8000/api/chat-agent"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _End:
    """Queued once the frame stream is over: `error` None means the user closed the client."""

    error: BaseException | None = None


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
        self._artifact = ArtifactView(url, token, self._on_status)
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
    def artifact(self) -> ArtifactState | None:
        """The conversation's artifact as of the last frame delivered (None: it has none)."""
        return self._artifact.state

    @property
    def artifact_fetches(self) -> int:
        """Versions fetched over HTTP because an `artifact_edit` was based on another version."""
        return self._artifact.fetches

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
            # A failed send shows up in the reader as the socket's close, handled there.
            with contextlib.suppress(ConnectionClosed):
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
        self._ws, session = await open_session(self.url, self.token, self.conversation_id,
                                               open_timeout=self._open_timeout, max_size=self._max_size)
        self.session, self.conversation_id = session, session.conversation_id
        self._artifact.reset(session)
        return session

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
                await self._skip_gap(loop.time())
                continue
            except ConnectionClosed as exc:
                return exc
            frame = parse_frame(data)
            if isinstance(frame, SessionFrame):
                self.session = frame
                self._artifact.reset(frame)
            else:
                await self._deliver(self._order.push(frame, loop.time()))

    async def _deliver(self, frames: list[AnyServerFrame]) -> None:
        for frame in frames:
            await self._artifact.follow(self.conversation_id or "", frame)
            self._queue.put_nowait(frame)

    async def _skip_gap(self, now: float) -> None:
        released = self._order.expire(now)
        if released:  # empty when the timer fired a hair early; the loop comes back
            first, last = self._order.gaps[-1]
            self._on_status(f"events {first}..{last} could not be replayed; continuing without them")
            await self._deliver(released)

    async def _reconnect_after(self, why: str) -> None:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._reconnect_timeout
        delay, cap = self._backoff
        lead = "connection lost"
        while (remaining := give_up - loop.time()) > 0:
            self._on_status(f"{lead} ({why}); reconnecting in {min(delay, remaining):.1f} s")
            await asyncio.sleep(min(delay, remaining))
            try:
                await self._open()
            except ConnectError as exc:
                if not exc.transient:
                    raise ConnectionLost(f"reconnecting was refused: {exc}") from exc
                lead, why, delay = "still disconnected", str(exc), min(delay * 2, cap)
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
        frame = await self._next(timeout)
        if frame is None:
            raise ConnectionLost("the client was closed")
        return frame

    async def frames(self) -> AsyncIterator[AnyServerFrame]:
        """Every server frame but `session`, forever; ends when `close()` is called."""
        while (frame := await self._next(None)) is not None:
            yield frame

    async def _next(self, timeout: float | None) -> AnyServerFrame | None:
        """The next frame, None once the client was closed, or the error that ended it."""
        async with asyncio.timeout(timeout):
            item = await self._queue.get()
        if not isinstance(item, _End):
            return item
        self._queue.put_nowait(item)  # every later call ends the same way
        if item.error is not None:
            raise item.error
        return None

    # ---- sending ----------------------------------------------------------------------

    async def send(self, frame: ClientModel) -> None:
        """Send a client frame. With `reconnect`, waits out a reconnect and sends again: the
        frame may then arrive twice, which is why `send_message` always sets `id`."""
        await self.send_raw(encode(frame))

    async def send_raw(self, text: str) -> None:
        """Send text as is, valid or not (tests of the server's input checks use it)."""
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

    async def send_message(self, content: str, settings: dict[str, Any] | None = None,
                           client_id: str | None = None, *, attachments: list[dict[str, Any]] | None = None,
                           canvas: dict[str, Any] | None = None, edit_of: str | None = None) -> str:
        """Start a turn (with `edit_of`, as a new version of that user message: a branch).
        Returns the message's client id (generated when not given)."""
        client_id = client_id or uuid.uuid4().hex
        optional = {"settings": settings, "attachments": attachments, "canvas": canvas, "edit_of": edit_of}
        await self.send(MessageIn(type="message", content=content, id=client_id,
                                  **{k: v for k, v in optional.items() if v is not None}))
        return client_id

    async def run_turn(self, content: str, settings: dict[str, Any] | None = None, *,
                       on_frame: OnFrame | None = None, timeout: float | None = None,
                       error_grace: float = 10.0, client_id: str | None = None,
                       attachments: list[dict[str, Any]] | None = None,
                       canvas: dict[str, Any] | None = None, edit_of: str | None = None) -> TurnDone:
        """Send a message and read its frames up to `done` (see turn.collect_turn).

        Assumes no other turn is running and earlier turns' frames were read: the first
        `done` that arrives is taken as this turn's.
        """
        async with asyncio.timeout(timeout):
            await self.send_message(content, settings, client_id, attachments=attachments, canvas=canvas,
                                    edit_of=edit_of)
            return await collect_turn(self.receive, on_frame, error_grace)

    async def regenerate(self, message_id: str | None = None, settings: dict[str, Any] | None = None) -> None:
        """Ask for another reply to the message that `message_id` (default: the last reply of
        the active path) answered: a sibling of that reply (PROTOCOL 1.2 trees)."""
        optional = {"message_id": message_id, "settings": settings}
        await self.send(RegenerateIn(type="regenerate", **{k: v for k, v in optional.items() if v is not None}))

    async def run_regenerate(self, message_id: str | None = None, settings: dict[str, Any] | None = None, *,
                             on_frame: OnFrame | None = None, timeout: float | None = None,
                             error_grace: float = 10.0) -> TurnDone:
        """`regenerate`, then the new reply's frames up to `done` (as `run_turn`)."""
        async with asyncio.timeout(timeout):
            await self.regenerate(message_id, settings)
            return await collect_turn(self.receive, on_frame, error_grace)

    async def switch_branch(self, message_id: str) -> None:
        """Makes the path through that message active; the server answers `history`."""
        await self.send(SwitchBranchIn(type="switch_branch", message_id=message_id))

    async def abort(self) -> None:
        await self.send(AbortIn(type="abort"))

    async def approve(self, tool_id: str, approved: bool, message: str | None = None) -> None:
        """Answers an `approval_request`: the tool runs, or it is declined with `message`."""
        extra = {"message": message} if message is not None else {}
        await self.send(ApproveIn(type="approve", tool_id=tool_id, approved=approved, **extra))

    async def decide_review(self, review_id: str, decision: str, message: str | None = None) -> None:
        """Answers a `review_request`: `revise` the result with the feedback, or `accept` it."""
        extra = {"message": message} if message is not None else {}
        await self.send(ReviewDecisionIn(type="review_decision", review_id=review_id, decision=decision,  # type: ignore[arg-type]
                                         **extra))

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
        `after_seq`, so the replayed frames are delivered again, in order (and `artifact`
        follows them again: an edit whose base it no longer holds fetches its version)."""
        loop = asyncio.get_running_loop()
        self._artifact.rewind(after_seq)
        await self._deliver(self._order.rewind(after_seq, loop.time()))
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
