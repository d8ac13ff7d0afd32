"""The visible history as the AI SDK's UI messages (`GET /api/chat/{id}/messages`), the shapes a
reply's stream builds (aisdk_stream.py), so `useChat({ messages })` opens a stored chat as it
was streamed: text, reasoning, tool parts with their outputs, reviews; a new step after each
call's results."""

from __future__ import annotations

from typing import Any

from chat_agent.protocol import AttachmentPart, ReviewPart, TextPart, ThinkingPart, ToolPart, VisibleMessage
from chat_agent.web.aisdk_stream import error_text

STOP_REASONS = {"complete": "end_turn", "aborted": "aborted", "error": "error", "refusal": "refusal",
                "interrupted": "error"}


def ui_message(message: VisibleMessage, conversation_id: str) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    after_results = True  # the first part opens the reply's first step
    for part in message.parts:
        is_tool = isinstance(part, ToolPart)
        if message.role == "assistant" and after_results and not isinstance(part, AttachmentPart):
            parts.append({"type": "step-start"})
        after_results = is_tool
        parts += _parts(part)
    metadata: dict[str, Any] = {"conversationId": conversation_id}
    if message.role == "assistant" and message.status in STOP_REASONS:
        metadata["stopReason"] = STOP_REASONS[message.status]
    return {"id": message.id, "role": message.role, "metadata": metadata, "parts": parts}


def _parts(part: Any) -> list[dict[str, Any]]:
    match part:
        case TextPart(text=text):
            return [{"type": "text", "text": text, "state": "done"}]
        case ThinkingPart(text=text):
            return [{"type": "reasoning", "text": text, "state": "done"}]
        case ToolPart():
            call = {"type": f"tool-{part.name}", "toolCallId": part.tool_id, "input": part.input,
                    "providerExecuted": True}
            if part.is_error:
                return [{**call, "state": "output-error", "errorText": error_text(part.output)}]
            return [{**call, "state": "output-available", "output": part.output}]
        case ReviewPart():
            return [{"type": "data-review", "id": part.review_id,
                     "data": part.model_dump(mode="json", exclude={"type"})}]
        case AttachmentPart(url=str() as url, media_type=str() as media_type):
            return [{"type": "file", "url": url, "mediaType": media_type,
                     **({"filename": part.filename} if part.filename else {})}]
    return []
