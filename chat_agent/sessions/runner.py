"""Drives one turn: runs the loop and turns its events into frames.

Whatever ends the turn (the model stopping, an error, abort), it returns the stop reason;
the turn (`RunningTurn`) then closes itself. It knows nothing of sockets.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import aclosing
from typing import Callable

from chat_agent.agent.critic import run_reviewed
from chat_agent.agent.events import (ApprovalRequested, ArtifactChanged, ArtifactDelta, Cited, ContextChanged, Event,
                                     ModelRetrying, ModelWaiting, ReviewAnswered, ReviewAsked, Reviewed, TextDelta,
                                     ThinkingDelta, ToolEnded, ToolProgressed, ToolStarted, TurnFailed, TurnFinished)
from chat_agent.agent.loop import Agent, Turn
from chat_agent.context.conversation import ConversationManager
from chat_agent.protocol import (ApprovalRequest, ArtifactChunk, CitationFrame, ContentChunk, ContextUpdate, ErrorFrame,
                                 ReviewDecided, ReviewFrame, ReviewRequest, ServerFrame, StatusFrame, StopReason,
                                 ThinkingChunk, ToolEnd, ToolProgress, ToolStart, Usage)
from chat_agent.tracing import turn_span

log = logging.getLogger(__name__)

Publish = Callable[[ServerFrame], object]
Notify = Callable[[StatusFrame], object]  # a frame outside the log: no seq, never stored
WAITING = "The model has not answered yet."
RETRYING = "The model API {reason}; trying again in {delay:.1f} s (attempt {attempt} of {attempts})."


async def drive(agent: Agent, manager: ConversationManager, turn: Turn, message_id: str,
                publish: Publish, turn_id: str | None = None, notify: Notify = lambda frame: None, *,
                start: int | None = None, rerun: list[dict] | None = None) -> tuple[StopReason, Usage, str | None]:
    """Runs the loop until it stops, publishing a frame for every event (`notify` gets the
    `status` ones); how it stopped, what it used, and `done.detail`. Abort is the
    cancellation of the task awaiting this; it returns "aborted" then, it does not raise.
    The turn is traced as one span (`invoke_agent`), its model and tool calls as children."""
    stop: StopReason = "error"
    usage, detail = Usage(), None
    with turn_span(turn.conversation_id, turn_id, turn.owner) as span:
        try:
            async with aclosing(run_reviewed(agent, manager, turn, start=start, rerun=rerun)) as events:
                async for event in events:
                    if isinstance(event, TurnFinished):
                        stop, usage, detail = event.stop_reason, event.usage, event.detail
                    elif isinstance(event, (ModelWaiting, ModelRetrying)):
                        notify(status_frame(event, message_id))
                    else:
                        if isinstance(event, ContextChanged) and event.usage is not None:
                            usage = event.usage  # kept if the turn is stopped before it finishes
                        if isinstance(event, TurnFailed):
                            span.failed(event.code)
                        publish(frame_for(event, message_id))
        except asyncio.CancelledError:
            stop = "aborted"
        except Exception as exc:
            log.exception("turn of %s failed", turn.conversation_id)
            span.failed(type(exc).__name__)
            publish(ErrorFrame(code="internal", message="Something went wrong on the server; the turn stopped."))
            stop = "error"
        span.stopped(stop)
    return stop, usage, detail


def status_frame(event: ModelWaiting | ModelRetrying, message_id: str) -> StatusFrame:
    """PROTOCOL 1.2 "Live status" for a model call that is silent or tried again."""
    if isinstance(event, ModelWaiting):
        return StatusFrame(message_id=message_id, state="waiting_model", detail=WAITING,
                           elapsed=round(event.elapsed, 3))
    detail = RETRYING.format(reason=event.reason, delay=event.delay, attempt=event.attempt, attempts=event.attempts)
    return StatusFrame(message_id=message_id, state="retrying", detail=detail, elapsed=round(event.elapsed, 3))


def frame_for(event: Event, message_id: str) -> ServerFrame:
    """The frame a client gets for one of the loop's events."""
    match event:
        case TextDelta(text=text):
            return ContentChunk(message_id=message_id, content=text)
        case ThinkingDelta(text=text):
            return ThinkingChunk(message_id=message_id, content=text)
        case Cited(citation=citation):
            return CitationFrame(message_id=message_id, citation=citation)
        case ArtifactDelta(tool_id=tool_id, text=text):
            return ArtifactChunk(tool_id=tool_id, content=text)
        case ArtifactChanged(frame=frame):
            return frame
        case ToolStarted(tool_id=tool_id, name=name, input=tool_input):
            return ToolStart(message_id=message_id, tool_id=tool_id, name=name, input=tool_input)
        case ApprovalRequested(tool_id=tool_id, name=name, input=tool_input):
            return ApprovalRequest(message_id=message_id, tool_id=tool_id, name=name, input=tool_input)
        case ToolProgressed(tool_id=tool_id, elapsed=elapsed, status=status):
            return ToolProgress(tool_id=tool_id, elapsed=round(elapsed, 3), status=status)
        case ToolEnded(tool_id=tool_id, name=name, output=output, duration=duration, is_error=is_error):
            return ToolEnd(tool_id=tool_id, name=name, output=output, duration=round(duration, 3), is_error=is_error)
        case ContextChanged(tokens=tokens, max_tokens=max_tokens, summarized=summarized):
            return ContextUpdate(tokens=tokens, max_tokens=max_tokens, summarized=summarized)
        case TurnFailed(code=code, message=message):
            return ErrorFrame(code=code, message=message)
        case Reviewed():
            return ReviewFrame(message_id=message_id, review_id=event.review_id, target=event.target,
                               passed=event.passed, score=event.score, feedback=event.feedback,
                               suggestions=event.suggestions, revision=event.revision)
        case ReviewAsked(review_id=review_id):
            return ReviewRequest(message_id=message_id, review_id=review_id)
        case ReviewAnswered(review_id=review_id, decision=decision, message=said, reason=reason):
            return ReviewDecided(message_id=message_id, review_id=review_id, decision=decision, message=said,
                                 reason=reason)
    raise TypeError(f"no frame for {event!r}")
