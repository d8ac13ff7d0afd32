"""`POST /api/ag-ui` (PROTOCOL 1.1 "AG-UI"): a run of the AG-UI protocol on the same turn
machinery as the WebSocket. The run's conversation is the caller's thread `threadId` (web/threads.py:
each user's thread names are their own; the state's `conversationId` is its id), its new message the last user message of `messages` (the server
keeps the history: earlier messages are not sent to the model again), and `forwardedProps`
may carry the WebSocket message's `settings`, `canvas` and `attachments`; `tools` and `context`
join the settings (the client's own tools, what the model is told). A run may instead answer
a turn that waits for the client (`resume`, tool results) and edit the canvas through its
`state` (agui_answers.py). The answer is an SSE stream of AG-UI events (agui_run.py). The
client closing the request aborts the turn, unless the run ended with the turn waiting for it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any, AsyncIterator

from ag_ui.core import (BaseEvent, DataSource, DocumentPart, FileSource, ImagePart, RunAgentInput, TextPart,
                        UserMessage)
from ag_ui.encoder import EventEncoder
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from chat_agent.protocol import (AbortIn, ApproveIn, MessageIn, ReviewDecisionIn, SessionFrame, SwitchBranchIn,
                                 ToolResultIn, server_frames)
from chat_agent.rejection import FrameRejected
from chat_agent.sessions.fold import open_tools
from chat_agent.sessions.hub import Hub
from chat_agent.sessions.live import LiveConversation
from chat_agent.web.agui_answers import Answer, answers, canvas_edit
from chat_agent.web.agui_branch import branch_point
from chat_agent.web.errors import error, reason
from chat_agent.web.frame_queue import GONE, FrameQueue
from chat_agent.web.http import authed
from chat_agent.web.agui_run import APPROVAL, REVIEW, AgUiRun, approval_interrupt, review_interrupt
from chat_agent.web.threads import conversation_for_thread

log = logging.getLogger(__name__)

THREAD_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


async def run_agent(request: Request, hub: Hub, owner: str) -> Response:
    body = await request.body()
    if len(body) > hub.settings.max_frame_bytes:
        return error(413, "too_large", f"The request has {len(body)} bytes; the limit is "
                                       f"{hub.settings.max_frame_bytes}. Upload files with POST /api/uploads.")
    try:
        run_input = RunAgentInput.model_validate_json(body)
        if not THREAD_ID.fullmatch(run_input.thread_id):
            raise ValueError("threadId must be 1 to 128 letters, digits, '-', '_', '.' or ':'")
        replies = answers(run_input)  # a run that answers what a waiting turn asked has no new message
        message = None if replies else _message(run_input)
    except (ValidationError, ValueError) as exc:
        return error(400, "invalid_request", f"Not an AG-UI RunAgentInput we can run: {reason(exc)}")
    conversation_id = await conversation_for_thread(hub.store, owner, run_input.thread_id)
    switch_to = None
    if message is not None:
        await request.app.state.quotas.start_turn(owner)  # QuotaExceeded: 429 before the stream starts
        await hub.writer.flush()  # the last run's reply is part of the tree the history is compared with
        point = await branch_point(hub.store, owner, conversation_id, run_input)  # 1.2 trees
        switch_to = point.switch_to
        if point.edit_of is not None:
            message = message.model_copy(update={"edit_of": point.edit_of})
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # proxies must not hold the stream
    encoder = EventEncoder(accept=request.headers.get("accept"))
    run = _Run(hub, owner, run_input, message, conversation_id, switch_to, replies)
    return StreamingResponse(run.stream(encoder), media_type=encoder.get_content_type(), headers=headers)


def _message(run_input: RunAgentInput) -> MessageIn:
    """The run's new message: the last user message, with the WebSocket's extras."""
    if not run_input.messages or not isinstance(run_input.messages[-1], UserMessage):
        raise ValueError("the last message must be the user's new message")
    content, attachments = _content(run_input.messages[-1].content)
    props = run_input.forwarded_props if isinstance(run_input.forwarded_props, dict) else {}
    extras = {key: props[key] for key in ("settings", "canvas") if key in props}
    settings = extras.get("settings", {})
    if not isinstance(settings, dict):
        raise ValueError("forwardedProps.settings must be an object")
    tools = [tool.model_dump(include={"name", "description", "parameters"}) for tool in run_input.tools or []]
    context = [item.model_dump() for item in run_input.context or []]
    extras["settings"] = {**settings, **({"clientTools": tools} if tools else {}),
                          **({"context": context} if context else {})}
    return MessageIn.model_validate({"type": "message", "content": content,
                                     "attachments": [*attachments, *props.get("attachments", [])], **extras})


def _content(content: str | list[Any]) -> tuple[str, list[dict[str, Any]]]:
    if isinstance(content, str):
        return content, []
    texts, attachments = [], []
    for part in content:
        if isinstance(part, TextPart):
            texts.append(part.text)
        elif isinstance(part, (ImagePart, DocumentPart)):
            attachments.append(_attachment(part))
        else:
            raise ValueError(f"a {part.type} part cannot be sent to this agent")
    return "\n\n".join(texts), attachments


def _attachment(part: ImagePart | DocumentPart) -> dict[str, Any]:
    source = part.source
    if isinstance(source, FileSource):  # a file uploaded with POST /api/uploads
        return {"type": part.type, "uploadId": source.value}
    if isinstance(part, ImagePart):
        if isinstance(source, DataSource):
            return {"type": "image", "data": source.value, "mediaType": source.mime_type}
        return {"type": "image", "url": source.value}
    raise ValueError("a document part must name an upload (a file source with its uploadId)")


class _Run:
    """One request's run: attached to the conversation only while its stream is read, so a
    client gone before the first byte leaves nothing behind."""

    def __init__(self, hub: Hub, owner: str, run_input: RunAgentInput, message: MessageIn | None,
                 conversation_id: str, switch_to: str | None = None, replies: list[Answer] | None = None):
        self.hub, self.owner, self.input, self.message = hub, owner, run_input, message
        self.replies = replies or []  # or, without a message: what answers the waiting turn
        self.switch_to = switch_to  # a reply whose path becomes active before the message (agui_branch.py)
        self.conversation_id = conversation_id
        self.frames = FrameQueue()
        self.sent = False  # the message went to the conversation: a client leaving now aborts it

    async def stream(self, encoder: EventEncoder) -> AsyncIterator[str]:
        hub = self.hub
        live = await hub.attach_thread(self.owner, self.conversation_id, self.frames)
        run = AgUiRun(self.input.thread_id, self.input.run_id, None, None, self.conversation_id)
        if live is None:  # deleted or taken since the request was checked
            for event in [*run.start(self.input), *run.refused("not_found", "No such conversation.")]:
                yield encoder.encode(event)
            return
        try:
            session = await hub.snapshot(live)
            if session is not None:
                run = self._run(session, live.id)
            for event in run.start(self.input):
                yield encoder.encode(event)
            async for event in self._events(live, run, session):
                yield encoder.encode(event)
        finally:
            if self.sent and not run.finished:
                # The client went away mid-run: its turn stops, like a WebSocket `abort`.
                hub.spawn(_abort(hub, live), f"ag-ui-abort:{live.id}")
            hub.detach(live, self.frames)

    def _run(self, session: SessionFrame, conversation_id: str) -> AgUiRun:
        """The run's translation, knowing what the turn waits for: its open interrupts, and its
        open calls (a call to the client's tool waits for its result unless this run has it)."""
        client = frozenset(tool.name for tool in self.input.tools or [])
        answered = {reply.tool_id for reply in self.replies if isinstance(reply, ToolResultIn)}
        reply = session.messages[-1] if session.running and session.messages else None
        calls = {part.tool_id: part.name in client and part.tool_id not in answered
                 for part in (open_tools(reply) if reply is not None and reply.role == "assistant" else [])}
        waiting = [*map(approval_interrupt, session.pending_approvals), *map(review_interrupt, session.pending_reviews)]
        return AgUiRun(self.input.thread_id, self.input.run_id, session.title, session.artifact, conversation_id,
                       waiting=waiting, open_calls=calls, answered=answered,
                       known={message.id for message in self.input.messages if message.role == "assistant"})

    async def _events(self, live: LiveConversation, run: AgUiRun,
                      session: SessionFrame | None) -> AsyncIterator[BaseEvent]:
        try:
            preparing = await self._send(live, run, session)
        except (FrameRejected, ValueError) as exc:
            self.sent = False
            code, text = (exc.code, exc.message) if isinstance(exc, FrameRejected) else ("invalid_frame", str(exc))
            for event in run.refused(code, text):
                yield event
            return
        while not run.finished:
            if preparing is None and self.frames.queue.empty():
                paused = run.pause()  # the turn waits for the client: this run is over, the turn is not
                if paused:
                    for event in paused:
                        yield event
                    return
            item = await self.frames.next(preparing)
            if item is GONE:
                for event in run.refused("internal", "The conversation went away during the run."):
                    yield event
            elif isinstance(item, asyncio.Future):
                preparing = None
                exc = None if item.cancelled() else item.exception()
                if isinstance(exc, FrameRejected):
                    for event in run.refused(exc.code, exc.message):
                        yield event
            else:
                for event in run.feed(server_frames.validate_json(item[1])):  # type: ignore[index]
                    yield event


    async def _send(self, live: LiveConversation, run: AgUiRun,
                    session: SessionFrame | None) -> asyncio.Future[object] | None:
        """Sends the run's frames to the conversation: the answers to what its turn waits for,
        or the user's canvas edit and the new message; the message's preparation, if any."""
        hub = self.hub
        self.sent = True
        for reply in self.replies:
            await hub.command(live, reply, echo=True)
            if isinstance(reply, ApproveIn):
                run.answered(APPROVAL + reply.tool_id)
            elif isinstance(reply, ReviewDecisionIn):
                run.answered(REVIEW + reply.review_id)
        if self.message is None:
            return None
        edit = canvas_edit(self.input.state, session.artifact if session is not None else None)
        if edit is not None:
            await hub.command(live, edit, echo=True)
        if self.switch_to is not None:
            await hub.command(live, SwitchBranchIn(type="switch_branch", message_id=self.switch_to), echo=True)
        return await hub.command(live, self.message, echo=True)


async def _abort(hub: Hub, live: LiveConversation) -> None:
    try:
        await hub.command(live, AbortIn(type="abort"))
    except FrameRejected:
        pass  # nothing left to stop
    except Exception:
        log.exception("could not abort the AG-UI run of %s", live.id)


routes = [Route("/api/ag-ui", authed(run_agent), methods=["POST"])]
