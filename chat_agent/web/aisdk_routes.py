"""`POST /api/chat` and `GET /api/chat/{id}/stream` (PROTOCOL 1.2 "The AI SDK UI message
stream"): `useChat` with its default transport, on the same turn machinery as the WebSocket.

The chat's `id` names the conversation as an AG-UI thread id does (web/threads.py: one of the
caller's conversations by its id, else the caller's own chat of that name). The server keeps the
history: the body's last message is what is new (aisdk_request.py), the earlier ones say where
it goes in the tree (aisdk_branch.py). The answer streams the reply (aisdk_stream.py).

The turn belongs to the conversation, not to the request: a client that drops the request
(a reload, a lost network) leaves it running and picks it up again with `GET …/stream` (a
replay of the reply from its start, as `useChat`'s `resume` expects; 204 when nothing runs).
`DELETE /api/chat/{id}/stream` stops it, like the WebSocket's `abort`. A reply that waits for
the user's approval ends its stream there; the next request carries the answers.
"""

from __future__ import annotations

import logging
from typing import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from chat_agent.protocol import AbortIn, AnyClientFrame, ArtifactEdit, SwitchBranchIn, server_frames
from chat_agent.rejection import FrameRejected
from chat_agent.sessions.hub import Hub
from chat_agent.sessions.live import LiveConversation
from chat_agent.web import aisdk_branch
from chat_agent.web.aisdk_history import ui_message
from chat_agent.web.aisdk_chunks import DONE_LINE, STREAM_HEADERS, AnyChunk
from chat_agent.web.aisdk_request import ChatRequest, ToolUIPart
from chat_agent.web.aisdk_stream import UiStream
from chat_agent.web.errors import error, reason
from chat_agent.web.frame_queue import GONE, FrameQueue
from chat_agent.web.http import authed
from chat_agent.web.threads import conversation_for_thread

log = logging.getLogger(__name__)
WAITING_STATES = ("input-available", "approval-requested", "approval-responded")  # a call not ended yet


async def chat(request: Request, hub: Hub, owner: str) -> Response:
    body = await request.body()
    if len(body) > hub.settings.max_frame_bytes:
        return error(413, "too_large", f"The request has {len(body)} bytes; the limit is "
                                       f"{hub.settings.max_frame_bytes}. Upload files with POST /api/uploads "
                                       "and send them by URL, or send only the new message.")
    try:
        chat_request = ChatRequest.model_validate_json(body)
        conversation_id = await conversation_for_thread(hub.store, owner, chat_request.id)
        if chat_request.last.role == "assistant" and chat_request.trigger == "submit-message":
            return await _answers(hub, owner, conversation_id, chat_request)
        commands = await _commands(request, hub, owner, conversation_id, chat_request)
    except ValueError as exc:  # pydantic's ValidationError among them
        return error(400, "invalid_request", f"Not a chat request we can run: {reason(exc)}")
    return _sse(_Follow(hub, owner, conversation_id).run(commands))


async def _commands(request: Request, hub: Hub, owner: str, conversation_id: str,
                    chat_request: ChatRequest) -> list[AnyClientFrame]:
    """What the conversation is asked to do: a new message or a regenerated reply, after the
    branch move the client's history asks for."""
    message = chat_request.message() if chat_request.trigger == "submit-message" else None
    await request.app.state.quotas.start_turn(owner)  # QuotaExceeded: 429 before the stream starts
    await hub.writer.flush()  # the last reply is part of the tree the history is compared with
    if message is None:
        return [await aisdk_branch.regenerate(hub.store, owner, conversation_id, chat_request)]
    point = await aisdk_branch.branch_point(hub.store, owner, conversation_id, chat_request)
    switch: list[AnyClientFrame] = []
    if point.switch_to is not None:
        switch = [SwitchBranchIn(type="switch_branch", message_id=point.switch_to)]
    if point.edit_of is not None:
        message = message.model_copy(update={"edit_of": point.edit_of})
    return [*switch, message]


async def _answers(hub: Hub, owner: str, conversation_id: str, chat_request: ChatRequest) -> Response:
    """The user's answers to the reply's approval requests, given to the turn. The stream goes
    on from the last frame the client had (`metadata.seq` of the reply, as the `finish` of its
    last stream left it): the running turn's frames up to there are read again unsent, so the
    stream knows the reply as the client does (its open calls, the requests still unanswered)."""
    reply = chat_request.last
    approvals = chat_request.approvals()
    if not approvals:
        raise ValueError("a request that ends with the assistant's reply must carry the user's answers to its "
                         "approval requests (tool parts in the state approval-responded)")
    seq = reply.seq()
    answered = {approval.tool_id for approval in approvals}
    follow = _Follow(hub, owner, conversation_id)
    running = await _running(hub, owner, conversation_id)
    if seq is not None and running is not None and running[1] == reply.id:
        ui = UiStream(conversation_id, None, reply_id=reply.id, answered=answered)
        return _sse(follow.run(approvals, ui=ui, after=running[0] - 1, quiet_until=seq))
    # Its turn is over (or the client kept no seq): from what the client's reply holds.
    calls = [part for part in reply.parts if isinstance(part, ToolUIPart) and part.state in WAITING_STATES]
    ui = UiStream(conversation_id, None, reply_id=reply.id, open_tools={part.tool_call_id for part in calls},
                  answered=answered)
    return _sse(follow.run(approvals, ui=ui, after=seq))


async def resume(request: Request, hub: Hub, owner: str) -> Response:
    """The running reply again from its start (useChat's `resumeStream`), or 204."""
    conversation_id = await conversation_for_thread(hub.store, owner, request.path_params["id"])
    running = await _running(hub, owner, conversation_id)
    if running is None:
        return Response(status_code=204)
    first_seq, reply_id = running
    ui = UiStream(conversation_id, None, reply_id=reply_id)
    return _sse(_Follow(hub, owner, conversation_id).run([], ui=ui, after=first_seq - 1))


async def history(request: Request, hub: Hub, owner: str) -> Response:
    """The chat's active path as UI messages (`useChat({ messages })` after a reload); none for a
    chat that has no message yet. A running reply is there as streamed so far."""
    conversation_id = await conversation_for_thread(hub.store, owner, request.path_params["id"])
    messages = []
    if await hub.store.get_conversation(owner, conversation_id) is not None:
        messages = await hub.visible_messages(owner, conversation_id)
    return JSONResponse({"conversationId": conversation_id,
                         "messages": [ui_message(message, conversation_id) for message in messages]})


async def stop(request: Request, hub: Hub, owner: str) -> Response:
    """Stops the running reply (useChat's `stop` only closes its request: the turn goes on)."""
    conversation_id = await conversation_for_thread(hub.store, owner, request.path_params["id"])
    if await hub.store.get_conversation(owner, conversation_id) is None:
        return error(404, "not_found", "No such conversation.")
    listener = FrameQueue()
    live = await hub.attach_thread(owner, conversation_id, listener)
    if live is not None:
        try:
            await hub.command(live, AbortIn(type="abort"))
        except FrameRejected:
            pass  # nothing left to stop
        finally:
            hub.detach(live, listener)
    return Response(status_code=204)


async def _running(hub: Hub, owner: str, conversation_id: str) -> tuple[int, str | None] | None:
    """The first seq of the conversation's running turn and its reply's id, None when none runs."""
    if await hub.store.get_conversation(owner, conversation_id) is None:
        return None
    await hub.writer.flush()  # a turn started here a moment ago is in the store
    turns = await hub.store.running_turns(conversation_id)
    if turns:
        turn = min(turns, key=lambda turn: turn.first_seq)
        return turn.first_seq, turn.message_id
    live = hub.live(owner, conversation_id)
    return (live.seq + 1, None) if live is not None and live.running else None  # preparing: nothing shown yet


def _sse(chunks: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(chunks, media_type="text/event-stream", headers=STREAM_HEADERS)


class _Follow:
    """One request's stream: attached to the conversation only while it is read, so a client
    gone before the first byte leaves nothing behind."""

    def __init__(self, hub: Hub, owner: str, conversation_id: str):
        self.hub, self.owner, self.conversation_id = hub, owner, conversation_id
        self.frames = FrameQueue()

    async def run(self, commands: list[AnyClientFrame], *, ui: UiStream | None = None, after: int | None = None,
                  quiet_until: int | None = None) -> AsyncIterator[str]:
        """Sends the commands, then streams the reply: the stored frames after `after` first
        (a replay; those up to `quiet_until`, which the client has, only read), then live ones,
        until it is done or waits for the user."""
        hub = self.hub
        live = await hub.attach_thread(self.owner, self.conversation_id, self.frames)
        if live is None:  # deleted or taken since the request was checked
            yield _text(UiStream(self.conversation_id, None).refused("No such conversation."))
            return
        try:
            ui = ui or UiStream(live.id, await hub.artifact(self.owner, live.id))
            if ui.artifact is None:
                ui.artifact = await hub.artifact(self.owner, live.id)
            if ui.reply_id is not None:
                yield _text(ui.start())
            async for chunks in self._chunks(live, ui, commands, after, quiet_until):
                if chunks:
                    yield _text(chunks)
            yield DONE_LINE
        finally:
            hub.detach(live, self.frames)

    async def _chunks(self, live: LiveConversation, ui: UiStream, commands: list[AnyClientFrame],
                      after: int | None, quiet_until: int | None) -> AsyncIterator[list[AnyChunk]]:
        preparing = None
        for command in commands:
            try:
                preparing = await self.hub.command(live, command, echo=True)
            except FrameRejected as exc:
                if command.type in ("message", "regenerate", "switch_branch"):
                    yield ui.refused(exc.message)
                    return
                log.info("an answer of the AI SDK client was refused: %s", exc.message)  # answered already
        if after is not None:
            await self.hub.writer.flush()
            quiet = quiet_until is not None
            for event in await self.hub.store.events_after(self.owner, live.id, after):
                if quiet and event.seq > quiet_until:  # type: ignore[operator]
                    quiet = False
                    ui.pause()  # where the client's last stream ended
                chunks = await self._feed(ui, server_frames.validate_json(event.frame))
                if not quiet:
                    yield chunks
                if ui.finished:
                    return
            if quiet:
                ui.pause()
            if not live.running and not ui.finished:  # over, and its end is no longer kept
                yield ui.pause()
                return
        while not ui.finished:
            if ui.waiting and self.frames.queue.empty():
                yield ui.pause()  # the turn waits for the user's answers: they come with the next request
                return
            item = await self.frames.next(preparing)
            if item is GONE:
                yield ui.refused("The conversation went away during the reply.")
            elif item is preparing:
                preparing = None
                exc = None if item.cancelled() else item.exception()  # type: ignore[union-attr]
                if isinstance(exc, FrameRejected):
                    yield ui.refused(exc.message)
            else:
                seq, text = item  # type: ignore[misc]
                if seq is None or seq > ui.seq:  # not in the replay already
                    yield await self._feed(ui, server_frames.validate_json(text))

    async def _feed(self, ui: UiStream, frame: object) -> list[AnyChunk]:
        chunks = ui.feed(frame)  # type: ignore[arg-type]
        if isinstance(frame, ArtifactEdit) and ui.stale_artifact:
            chunks += ui.artifact_now(await self.hub.artifact(self.owner, self.conversation_id))
        return chunks


def _text(chunks: list[AnyChunk]) -> str:
    return "".join(chunk.sse() for chunk in chunks)


routes = [Route("/api/chat", authed(chat), methods=["POST"]),
          Route("/api/chat/{id}/stream", authed(resume), methods=["GET"]),
          Route("/api/chat/{id}/messages", authed(history), methods=["GET"]),
          Route("/api/chat/{id}/stream", authed(stop), methods=["DELETE"])]
