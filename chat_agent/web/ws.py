"""The WebSocket endpoint: one Connection per socket, reading client frames and writing
the conversation's frames in seq order. It knows the protocol and the hub, not the model."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections import deque
from dataclasses import dataclass

from pydantic import ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from chat_agent.eager import eager
from chat_agent.quotas import QuotaExceeded, Quotas
from chat_agent.sessions.commands import for_sender
from chat_agent.sessions.hub import Hub
from chat_agent.sessions.live import CLOSE_INTERNAL, LiveConversation
from chat_agent.sessions.registry import CLOSE_NOT_FOUND
from chat_agent.protocol import (CLIENT_TYPES, ToolResultIn, RegenerateIn, RenameIn, SwitchBranchIn, AbortIn, ApproveIn, ReviewDecisionIn, ClearContextIn, EditArtifactIn, ErrorCode, ErrorFrame, MessageIn,
                       PingIn, Pong, ResumeIn, SelectArtifactVersionIn, client_frames)
from chat_agent.rejection import FrameRejected
from chat_agent.store import StoreUnavailable
from chat_agent.text import all_encodable
from chat_agent.web.backlog import Backlogs
from chat_agent.web.threads import thread_conversation_id

log = logging.getLogger(__name__)

CLOSE_UNAUTHORIZED, CLOSE_TRY_AGAIN, CLOSE_RATE_LIMITED = 4401, 1013, 4429
# How a socket that went away shows itself; anything else ending a loop is a failure of ours.
GONE = (WebSocketDisconnect, RuntimeError, OSError)
# What a client is told when something it asked for needs the store and the store does not
# answer (a cut database): its socket stays open, a running turn goes on from memory.
STORE_DOWN = "The server cannot reach its storage right now; try again in a moment."


@dataclass(slots=True)
class _Replay:
    after_seq: int


class Connection:
    """A listener on one conversation. Frames queue here and one task writes them, so a slow
    socket never holds up the turn or other clients; `Backlogs` bounds what may queue.

    The socket's own task reads client frames; the writing task exists only while something
    is queued: an idle socket holds one task, not three (~1.5 KiB each with `asyncio.wait`)."""

    def __init__(self, ws: WebSocket, hub: Hub, owner: str, backlogs: Backlogs, quotas: Quotas):
        self.ws = ws
        self.hub = hub
        self.owner = owner
        self._quotas = quotas
        self.live: LiveConversation | None = None
        # Made when something is queued and dropped once sent: an empty deque is ~760 bytes.
        self._out: deque[tuple[int | None, str, int] | _Replay] | None = None
        self._open = False  # its `session` went out: frames may follow
        self._last_seq = 0  # the newest seq this socket holds: in its `session`, or sent as a frame
        # The seqs sent as frames on this socket, (low, high]: one run, since live frames go out
        # in order and a replay only extends it. None until the first.
        self._sent: tuple[int, int] | None = None
        self._backlogs = backlogs
        self._sender: asyncio.Future[None] | None = None  # the writing, while it runs
        self._serving: asyncio.Task[object] | None = None  # the socket's task, while it reads frames
        self._stopped = False  # the reading was ended by us (a close asked for, the writing failed)
        self._send_failure: BaseException | None = None
        self._closing: tuple[int, str | None] | None = None
        self._left = False  # the client closed the socket

    # ---- Listener ---------------------------------------------------------------------------

    def deliver(self, seq: int | None, text: str) -> None:
        self._queue(seq, text)

    def close(self, code: int, text: str | None = None) -> None:
        if self._closing is None:
            self._closing = (code, text)
            self._kick()

    def drop_behind(self, queued: int) -> None:
        self._out = None
        self.close(CLOSE_TRY_AGAIN)
        if self._sender is not None:
            self._sender.cancel()  # it may be stuck writing to a client that does not read

    # ---- serving ----------------------------------------------------------------------------

    async def serve(self, live: LiveConversation) -> None:
        self.live = live
        generation = live.generation
        session = await self.hub.snapshot(live)  # all of it committed
        if self._closing is not None:  # closed meanwhile (the state it was made from was not kept)
            await self._end(None)
            return
        if session is None:  # deleted meanwhile
            frame = ErrorFrame(conversation_id=live.id, code="not_found", message="No such conversation.")
            await self.ws.send_text(frame.to_json())
            await self.ws.close(CLOSE_NOT_FOUND)
            return
        self._last_seq = session.seq or 0
        text = session.to_json()
        del session  # an idle connection should not keep its snapshot alive
        if live.generation != generation:
            await self.ws.close(CLOSE_INTERNAL)  # a write of that state failed: reconnect to see what was kept
            return
        await self.ws.send_text(text)
        del text
        self._open = True
        if self._out or self._closing is not None:
            self._kick()
        failure: BaseException | None = None
        self._serving = asyncio.current_task()
        try:
            await self._receive_loop()
        except asyncio.CancelledError:
            if not self._stopped:
                raise
            self._serving.uncancel()  # ours, from `_stop_reading`: the close goes out below
        except GONE:
            pass
        except Exception as exc:
            failure = exc
        finally:
            self._serving = None
            self._open = False  # nothing more is written: the writer is not started again
            if self._sender is not None:
                self._sender.cancel()
                await asyncio.gather(self._sender, return_exceptions=True)
            self._backlogs.forget(self)
        if failure is None and self._send_failure is not None and not isinstance(self._send_failure, GONE):
            failure = self._send_failure
        await self._end(failure)

    def _kick(self) -> None:
        """Starts the writing, unless it runs (or the `session` has not gone out yet). Started
        eagerly: what the socket takes at once is written now, within the commit that
        delivered it, not in the event loop's next turn (see `eager`); the writing goes on
        as a task only where it has to wait."""
        if self._sender is None and self._open:
            self._sender = sender = eager(self._send_loop())
            if sender.done():
                self._sender_done(sender)
            else:
                sender.add_done_callback(self._sender_done)

    def _sender_done(self, task: asyncio.Future[None]) -> None:
        self._sender = None
        failure = None if task.cancelled() else task.exception()
        if failure is not None:
            self._send_failure = failure
            self._stop_reading()
        elif self._closing is not None:
            self._stop_reading()  # all sent (or dropped behind): the close goes out
        elif self._out:
            self._kick()

    def _stop_reading(self) -> None:
        if self._serving is not None and not self._stopped:
            self._stopped = True
            self._serving.cancel()

    async def _end(self, failure: BaseException | None) -> None:
        """Closes the socket as the way the loops ended says: our failure (1011, never a
        socket left half alive), a close asked for, or nothing when the client left."""
        if failure is not None:
            log.error("connection to conversation %s failed; closing it (%d)", self.live.id, CLOSE_INTERNAL,
                      exc_info=failure)
            frame = ErrorFrame(conversation_id=self.live.id, code="internal",
                               message="The server failed on this connection; reconnect and resume.")
            code, text = CLOSE_INTERNAL, frame.to_json()
        elif self._closing is not None and not self._left:
            code, text = self._closing
        else:
            return
        if text is not None:
            await self.ws.send_text(text)
        await self.ws.close(code)

    async def _send_loop(self) -> None:
        """Writes what is queued, then ends (`_kick` starts it again for the next frames)."""
        while self._out:
            item = self._out.popleft()
            if isinstance(item, _Replay):
                await self._replay(item.after_seq)
                continue
            seq, text, size = item
            self._backlogs.sent(self, size)
            if seq is not None:
                if seq > self._last_seq + 1:
                    await self._fill(seq)
                if seq <= self._last_seq:
                    continue  # already in the snapshot or a replay
                self._last_seq = seq
                self._mark_sent(seq - 1, seq)
            await self.ws.send_text(text)
        self._out = None

    async def _fill(self, seq: int) -> None:
        """Frames before `seq` this socket never got (written while its instance changed from
        following the conversation to owning it, say): sent from the log first, in order.
        The store failing now, it goes on without them rather than failing the socket."""
        try:
            await self._replay(self._last_seq)
        except GONE:
            raise
        except Exception as exc:
            log.warning("could not read frames %d..%d of %s: %s", self._last_seq + 1, seq - 1, self.live.id, exc)

    async def _replay(self, after_seq: int) -> None:
        """Sends what the log holds past `after_seq` that this socket was not sent yet. Each seq
        reaches a socket at most once: a socket that reconnected was sent live frames before
        its `resume` was read (newer than what its `session` summed up); it gets the older
        ones it lacks and none twice. (Reading frames again takes a new connection.)"""
        live = self.live
        events = await self.hub.store.events_after(live.owner, live.id, after_seq)
        low, high = self._sent or (after_seq, after_seq)
        # Frames queued while the log was read go out from the queue, in order with what was
        # queued between them without a seq (a `status`): the replay stops short of them.
        stop = next((item[0] for item in self._out or () if not isinstance(item, _Replay) and item[0] is not None),
                    None)
        for event in events:
            if stop is not None and event.seq >= stop:
                break
            if low < event.seq <= high:
                continue
            await self.ws.send_text(event.frame)
            self._last_seq = max(self._last_seq, event.seq)
            self._mark_sent(after_seq, event.seq)

    def _mark_sent(self, low: int, high: int) -> None:
        if self._sent is None:
            self._sent = (low, high)
        else:
            self._sent = (min(self._sent[0], low), max(self._sent[1], high))

    async def _receive_loop(self) -> None:
        limit = self.hub.settings.max_frame_bytes
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                self._left = True
                return
            if self._closing is not None:
                continue  # on its way out: nothing more is acted on
            text = message.get("text")
            if text is None:
                self._local_error("invalid_frame", "Frames must be JSON text, not binary.")
                continue
            size = len(text) if text.isascii() else len(text.encode())
            if size > limit:
                self._local_error("too_large", f"The frame has {size} bytes; the limit is {limit}. Send large "
                                               "files with POST /api/uploads and attach them by uploadId.")
                continue
            await self._handle(text)

    async def _handle(self, text: str) -> None:
        try:
            frame = _parse(text)
            await self._dispatch(frame)
        except FrameRejected as exc:
            self._reject(exc)
        except StoreUnavailable as exc:
            log.warning("could not handle a client frame: the store is unavailable (%s)", exc)
            self._local_error("internal", STORE_DOWN)
        except Exception:
            log.exception("failed to handle a client frame")
            self._local_error("internal", "The server failed to handle that frame.")

    def _reject(self, exc: FrameRejected) -> None:
        """Tells this socket why its frame was refused. (What everyone on the conversation
        should see, the owner published in it; a command forwarded to an owner that did
        not answer is told to this socket only.)"""
        self._local_error(exc.code, exc.message)

    def _started(self, started: asyncio.Future[object]) -> None:
        """The outcome of a message's preparation (its attachments checked, its turn started)."""
        if started.cancelled():
            return  # aborted: the turn has published `done`
        exc = started.exception()
        if isinstance(exc, FrameRejected):
            if for_sender(exc):
                self._reject(exc)  # else the owner published it
        elif exc is not None:
            log.error("failed to start a turn", exc_info=exc)
            self._local_error("internal", "The server failed to start that turn.")

    async def _dispatch(self, frame: object) -> None:
        live, hub = self.live, self.hub
        match frame:
            case MessageIn() | RegenerateIn():
                try:
                    await self._quotas.start_turn(self.owner)
                except QuotaExceeded as exc:
                    self._local_error("rate_limited", exc.message, exc.retry_after)
                    return
                # Returns once the conversation is busy with it; checking attachments may take
                # seconds, and an `abort` sent meanwhile must be read.
                task = await hub.command(live, frame)
                if task is not None:
                    task.add_done_callback(self._started)
            case AbortIn() | ApproveIn() | ReviewDecisionIn() | ClearContextIn() | SelectArtifactVersionIn() \
                    | EditArtifactIn() | SwitchBranchIn() | RenameIn() | ToolResultIn():
                await hub.command(live, frame)
            case ResumeIn(after_seq=after_seq):
                if self._closing is None:
                    # Ahead of live frames queued meanwhile: the replay reads them from the log
                    # too (they are committed), in order, and they are skipped once sent.
                    self._outbox().appendleft(_Replay(after_seq))
                    self._kick()
            case PingIn():
                # Ahead of whatever streams meanwhile (a client measures its connection with
                # it, and a pong behind a burst of frames would say the link is down).
                self._queue(None, Pong(conversation_id=live.id).to_json(), urgent=True)

    def _local_error(self, code: ErrorCode, message: str, retry_after: int | None = None) -> None:
        conversation_id = self.live.id if self.live else ""
        self._send_local(ErrorFrame(conversation_id=conversation_id, code=code, message=message,
                                    retry_after=retry_after).to_json())

    def _send_local(self, text: str) -> None:
        self._queue(None, text)

    def _outbox(self) -> deque[tuple[int | None, str, int] | _Replay]:
        if self._out is None:
            self._out = deque()
        return self._out

    def _queue(self, seq: int | None, text: str, *, urgent: bool = False) -> None:
        if self._closing is not None:
            return  # on its way out: nothing more is sent
        # What the string really holds in memory (1, 2 or 4 bytes a character), in O(1).
        size = sys.getsizeof(text)
        if urgent:
            self._outbox().appendleft((seq, text, size))
        else:
            self._outbox().append((seq, text, size))
        # Counted before the writing starts, which may send it at once (and uncount it); it
        # may drop this connection, or another.
        self._backlogs.add(self, size)
        self._kick()


_TOO_DEEP = "The frame is nested too deeply."


def _parse(text: str) -> object:
    try:
        data = json.loads(text)
    except RecursionError:
        raise FrameRejected("invalid_frame", _TOO_DEEP) from None
    except ValueError:
        raise FrameRejected("invalid_frame", "The frame is not valid JSON.") from None
    if not isinstance(data, dict):
        raise FrameRejected("invalid_frame", "A frame must be a JSON object.")
    kind = data.get("type")
    if not isinstance(kind, str):
        raise FrameRejected("invalid_frame", "A frame needs a string `type`.")
    if kind not in CLIENT_TYPES:
        raise FrameRejected("unknown_type", f"Unknown frame type {kind!r}.")
    if not all_encodable(data):
        raise FrameRejected("invalid_frame", "The frame holds text that is not valid Unicode (a lone surrogate "
                                             "such as \\ud800); nothing of it was kept.")
    try:
        return client_frames.validate_python(data)
    except RecursionError:
        raise FrameRejected("invalid_frame", _TOO_DEEP) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "frame"
        raise FrameRejected("invalid_frame", f"Invalid `{kind}` frame: {where}: {first['msg']}.") from None


async def chat_endpoint(ws: WebSocket) -> None:
    hub: Hub = ws.app.state.hub
    owner = await ws.app.state.auth.user(ws.headers, ws.query_params)
    await ws.accept()
    if owner is None:
        frame = ErrorFrame(code="unauthorized", message="A valid token is required (query `token` or Bearer header).")
        await ws.send_text(frame.to_json())
        await ws.close(CLOSE_UNAUTHORIZED)
        return
    quotas: Quotas = ws.app.state.quotas
    try:
        held = await quotas.open_socket(owner)
    except QuotaExceeded as exc:
        frame = ErrorFrame(code="rate_limited", message=exc.message, retry_after=exc.retry_after)
        await ws.send_text(frame.to_json())
        await ws.close(CLOSE_RATE_LIMITED)
        return
    try:
        await _serve(ws, hub, owner, quotas)
    finally:
        await quotas.close_socket(held)


async def _serve(ws: WebSocket, hub: Hub, owner: str, quotas: Quotas) -> None:
    conversation_id = ws.query_params.get("conversationId") or None
    connection = Connection(ws, hub, owner, ws.app.state.backlogs, quotas)
    try:
        live = await hub.attach(owner, conversation_id, connection)
        if live is None and conversation_id is not None:  # the caller's AG-UI thread of that name
            live = await hub.attach(owner, thread_conversation_id(owner, conversation_id), connection)
    except StoreUnavailable as exc:
        await _store_down(ws, conversation_id, exc)
        return
    if live is None:
        frame = ErrorFrame(conversation_id=conversation_id or "", code="not_found", message="No such conversation.")
        try:
            await ws.send_text(frame.to_json())
            await ws.close(CLOSE_NOT_FOUND)
        except GONE:  # the client gave up waiting (a store that was slow to answer)
            pass
        return
    try:
        await connection.serve(live)
    except StoreUnavailable as exc:  # its `session` could not be read
        await _store_down(ws, live.id, exc)
    except (WebSocketDisconnect, RuntimeError, OSError):
        # The client went away (Starlette says so with RuntimeError too); its conversation
        # and any running turn carry on. With the socket still up, it is our failure: said
        # and closed, never left for the server to drop without a close frame.
        if ws.client_state is WebSocketState.CONNECTED and ws.application_state is WebSocketState.CONNECTED:
            log.exception("connection to conversation %s failed; closing it (%d)", live.id, CLOSE_INTERNAL)
            try:
                await ws.close(CLOSE_INTERNAL)
            except GONE:
                pass
    finally:
        hub.detach(live, connection)


async def _store_down(ws: WebSocket, conversation_id: str | None, exc: Exception) -> None:
    """No `session` can be made while the store does not answer: the client is told so and
    asked to connect again later (1013), instead of a server error."""
    log.warning("refused a connection: the store is unavailable (%s)", exc)
    try:
        await ws.send_text(ErrorFrame(conversation_id=conversation_id or "", code="internal",
                                      message=STORE_DOWN).to_json())
        await ws.close(CLOSE_TRY_AGAIN)
    except GONE:
        pass
