"""Folds a turn's frames into the reply as the visible history shows it.

The same function builds the reply while it streams (for `session` snapshots) and rebuilds
it from the event log after a crash, so both always agree on what the user saw.
"""

from __future__ import annotations

from chat_agent.protocol import (ContentChunk, Done, MessageStatus, ServerFrame, StopReason, ThinkingChunk,
                                 ToolCallRecord, ToolEnd, ToolStart, VisibleMessage)

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
            message.content += text
        case ThinkingChunk(content=text):
            message.thinking = (message.thinking or "") + text
        case ToolStart(tool_id=tool_id, name=name, input=tool_input):
            message.tool_calls.append(ToolCallRecord(tool_id=tool_id, name=name, input=tool_input))
        case ToolEnd(tool_id=tool_id, output=output, is_error=is_error, duration=duration):
            for call in message.tool_calls:
                if call.tool_id == tool_id:
                    call.output, call.is_error, call.duration = output, is_error, duration
        case Done(stop_reason=reason):
            message.status = reply_status(reason)


def open_tools(message: VisibleMessage) -> list[ToolCallRecord]:
    """Tool calls that started and have not ended."""
    return [call for call in message.tool_calls if call.duration is None]
