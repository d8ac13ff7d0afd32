"""The WebSocket endpoint: one Connection per socket, reading client frames and writing
the conversation's frames in seq order. It knows the protocol and the hub, not the model."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from dataclasses import dataclass

from pydantic import ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from chat_agent.web.auth import authenticate
from chat_agent.sessions.hub import Hub
from chat_agent.sessions.live import LiveConversation
from chat_agent.protocol import (CLIENT_TYPES, AbortIn, ClearContextIn, EditArtifactIn, ErrorCode, ErrorFrame, MessageIn,
                       PingIn, Pong, ResumeIn, SelectArtifactVersionIn, client_frames)
from chat_agent.rejection import FrameRejected

log = logging.getLogger(__name__)

CLOSE_UNAUTHORIZED, CLOSE_NOT_FOUND, CLOSE_TRY_AGAIN = 4401, 4404, 1013
MAX_BACKLOG = 64 << 20  # characters queued for a client that does not read; past that it must resume
LOCAL_CODES = {"invalid_frame", "unknown_type", "empty_message", "too_large"}  # answers to malformed frames


@dataclass(slots=True)
class _Replay:
    after_seq: int


class Connection:
    """A listener on one conversation. Frames queue here and one task writes them, so a slow
    socket never holds up the turn or other clients."""

    def __init__(self, ws: WebSocket, hub: Hub, owner: str):
        self.ws = ws
        self.hub = hub
        self.owner = owner
        self.live: LiveConversation | None = None
        self._out: deque[tuple[int | None, str] | _Replay] = deque()
        self._wake = asyncio.Event()
        self._last_seq = 0
        self._backlog = 0  # characters queued and not yet sent
        self._closing: tuple[int, str | None] | None = None

    # ---- Listener ---------------------------------------------------------------------------

    def deliver(self, seq: int, text: str) -> None:
        if self._backlog > MAX_BACKLOG:
            self.close(CLOSE_TRY_AGAIN)
            return
        self._backlog += len(text)
        self._out.append((seq, text))
        self._wake.set()

    def close(self, code: int, text: str | None = None) -> None:
        if self._closing is None:
            self._closing = (code, text)
            self._wake.set()

    # ---- serving ----------------------------------------------------------------------------

    async def serve(self, live: LiveConversation) -> None:
        self.live = live
        session, ticket = live.snapshot(self.hub.tools())
        self._last_seq = session.seq or 0
        text = session.to_json()
        del session  # an idle connection should not keep its snapshot alive
        await self.hub.writer.wait_for(ticket)  # never show state a crash could still take back
        await self.ws.send_text(text)
        del text
        sender = asyncio.create_task(self._send_loop())
        try:
            await self._receive_loop()
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)

    async def _send_loop(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._out:
                    item = self._out.popleft()
                    if isinstance(item, _Replay):
                        await self._replay(item.after_seq)
                        continue
                    seq, text = item
                    if seq is not None:
                        self._backlog -= len(text)
                        if seq <= self._last_seq:
                            continue  # already in the snapshot or a replay
                        self._last_seq = seq
                    await self.ws.send_text(text)
                if self._closing is not None:
                    code, text = self._closing
                    if text is not None:
                        await self.ws.send_text(text)
                    await self.ws.close(code)
                    return
        except (WebSocketDisconnect, RuntimeError, OSError):
            return  # the socket went away; the receive loop notices too

    async def _replay(self, after_seq: int) -> None:
        live = self.live
        events = await self.hub.store.events_after(live.owner, live.id, after_seq)
        for event in events:
            await self.ws.send_text(event.frame)
            self._last_seq = max(self._last_seq, event.seq)

    async def _receive_loop(self) -> None:
        limit = self.hub.settings.max_frame_bytes
        while self._closing is None:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
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
        except Exception:
            log.exception("failed to handle a client frame")
            self._local_error("internal", "The server failed to handle that frame.")

    def _reject(self, exc: FrameRejected) -> None:
        if exc.code in LOCAL_CODES:
            self._local_error(exc.code, exc.message)
        else:
            self.live.publish(ErrorFrame(code=exc.code, message=exc.message))

    def _started(self, task: asyncio.Task[None]) -> None:
        """The outcome of a message's preparation (its attachments checked, its turn started)."""
        if task.cancelled():
            return  # aborted: the hub has published `done`
        exc = task.exception()
        if isinstance(exc, FrameRejected):
            self._reject(exc)
        elif exc is not None:
            log.error("failed to start a turn", exc_info=exc)
            self._local_error("internal", "The server failed to start that turn.")

    async def _dispatch(self, frame: object) -> None:
        live, hub = self.live, self.hub
        match frame:
            case MessageIn():
                # Not awaited: checking attachments may take seconds, and an `abort` sent
                # meanwhile must be read (the conversation is busy until the turn starts).
                task = hub.start_turn(live, frame)
                if task is not None:
                    task.add_done_callback(self._started)
            case AbortIn():
                await live.abort()
            case ClearContextIn():
                await hub.clear(live)
            case SelectArtifactVersionIn(index=index):
                await hub.select_version(live, index)
            case EditArtifactIn(content=content, title=title):
                hub.edit_artifact(live, content, title)
            case ResumeIn(after_seq=after_seq):
                self._out.append(_Replay(after_seq))
                self._wake.set()
            case PingIn():
                self._send_local(Pong(conversation_id=live.id).to_json())

    def _local_error(self, code: ErrorCode, message: str) -> None:
        conversation_id = self.live.id if self.live else ""
        self._send_local(ErrorFrame(conversation_id=conversation_id, code=code, message=message).to_json())

    def _send_local(self, text: str) -> None:
        self._out.append((None, text))
        self._wake.set()


def _parse(text: str) -> object:
    try:
        data = json.loads(text)
    except ValueError:
        raise FrameRejected("invalid_frame", "The frame is not valid JSON.") from None
    if not isinstance(data, dict):
        raise FrameRejected("invalid_frame", "A frame must be a JSON object.")
    kind = data.get("type")
    if not isinstance(kind, str):
        raise FrameRejected("invalid_frame", "A frame needs a string `type`.")
    if kind not in CLIENT_TYPES:
        raise FrameRejected("unknown_type", f"Unknown frame type {kind!r}.")
    try:
        return client_frames.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "frame"
        raise FrameRejected("invalid_frame", f"Invalid `{kind}` frame: {where}: {first['msg']}.") from None


async def chat_endpoint(ws: WebSocket) -> None:
    hub: Hub = ws.app.state.hub
    owner = authenticate(hub.settings, ws.headers, ws.query_params)
    await ws.accept()
    if owner is None:
        frame = ErrorFrame(code="unauthorized", message="A valid token is required (query `token` or Bearer header).")
        await ws.send_text(frame.to_json())
        await ws.close(CLOSE_UNAUTHORIZED)
        return
    conversation_id = ws.query_params.get("conversationId") or None
    connection = Connection(ws, hub, owner)
    live = await hub.attach(owner, conversation_id, connection)
    if live is None:
        frame = ErrorFrame(conversation_id=conversation_id or "", code="not_found", message="No such conversation.")
        await ws.send_text(frame.to_json())
        await ws.close(CLOSE_NOT_FOUND)
        return
    try:
        await connection.serve(live)
    except (WebSocketDisconnect, RuntimeError, OSError):
        pass  # the client went away; its conversation and any running turn carry on
    finally:
        hub.detach(live, connection)
