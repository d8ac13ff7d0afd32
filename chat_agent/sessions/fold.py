"""Folds a turn's frames into the reply as the visible history shows it.

The same function builds the reply while it streams (for `session` snapshots) and rebuilds
it from the event log after a crash, so both always agree on what the user saw.

The reply's parts follow the frames, so a client folding the same frames gets the same
parts: consecutive `content_chunk`s (or `thinking_chunk`s) extend one part, anything else
in between starts a new one. Tool cards take their place at `tool_start`, which comes once
the model call that asked for them is complete.
"""

from __future__ import annotations

from chat_agent.protocol import (ApprovalInfo, ApprovalRequest, CitationFrame, ContentChunk, Done, MessageStatus,
                                 ReviewDecided, ReviewFrame, ReviewInfo, ReviewPart, ReviewRequest, ServerFrame,
                                 StopReason, TextPart, ThinkingChunk, ThinkingPart, ToolEnd, ToolPart, ToolProgress,
                                 ToolStart, VisibleMessage)

_STATUS: dict[str, MessageStatus] = {"aborted": "aborted", "error": "error"}


def status_for(stop: StopReason) -> MessageStatus:
    """How a turn ended, by its stop reason."""
    return _STATUS.get(stop, "complete")


def reply_status(stop: StopReason) -> MessageStatus:
    """How a reply ended: as its turn, but a refused one says so (it left the model's history)."""
    return "refusal" if stop == "refusal" else status_for(stop)


def fold(message: VisibleMessage, frame: ServerFrame) -> None:
    match frame:
        case ContentChunk(content=text):
            _extend(message, TextPart, text)
        case ThinkingChunk(content=text):
            _extend(message, ThinkingPart, text)
        case CitationFrame(citation=citation):
            # It belongs to the text streamed so far: the text part being written, or one it opens.
            last = message.parts[-1] if message.parts else None
            if not isinstance(last, TextPart):
                last = TextPart(text="")
                message.parts.append(last)
            last.citations.append(citation.model_copy(update={"offset": len(last.text)}))
        case ToolStart(tool_id=tool_id, name=name, input=tool_input):
            message.parts.append(ToolPart(tool_id=tool_id, name=name, input=tool_input))
        case ToolEnd(tool_id=tool_id, output=output, is_error=is_error, duration=duration):
            for part in message.parts:
                if isinstance(part, ToolPart) and part.tool_id == tool_id:
                    part.output, part.is_error, part.duration = output, is_error, duration
        case ReviewFrame():
            message.parts.append(ReviewPart.model_validate(frame.model_dump(
                include={"review_id", "target", "passed", "score", "feedback", "suggestions", "revision"})))
        case ReviewDecided(review_id=review_id, decision=decision):
            for part in message.parts:
                if isinstance(part, ReviewPart) and part.review_id == review_id:
                    part.decision = decision
        case Done(stop_reason=reason):
            message.status = reply_status(reason)


def _extend(message: VisibleMessage, kind: type[TextPart] | type[ThinkingPart], text: str) -> None:
    if not text:
        return
    last = message.parts[-1] if message.parts else None
    if isinstance(last, kind):
        last.text += text
    else:
        message.parts.append(kind(text=text))


def open_tools(message: VisibleMessage) -> list[ToolPart]:
    """Tool calls that started and have not ended."""
    return [part for part in message.parts if isinstance(part, ToolPart) and part.duration is None]


def track_approvals(pending: dict[str, ApprovalInfo], frame: ServerFrame) -> None:
    """Keeps the approval requests not answered yet (`session.pendingApprovals`): a request
    is answered once its call shows progress (approved) or ends (declined, timed out)."""
    match frame:
        case ApprovalRequest(message_id=message_id, tool_id=tool_id, name=name, input=tool_input):
            pending[tool_id] = ApprovalInfo(message_id=message_id, tool_id=tool_id, name=name, input=tool_input)
        case ToolProgress(tool_id=tool_id) | ToolEnd(tool_id=tool_id):
            pending.pop(tool_id, None)


def track_reviews(pending: dict[str, ReviewInfo], frame: ServerFrame) -> None:
    """Keeps the reviews that wait for the user's decision (`session.pendingReviews`)."""
    match frame:
        case ReviewRequest(message_id=message_id, review_id=review_id):
            pending[review_id] = ReviewInfo(message_id=message_id, review_id=review_id)
        case ReviewDecided(review_id=review_id):
            pending.pop(review_id, None)
