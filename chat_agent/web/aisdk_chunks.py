"""The chunks of the AI SDK's UI message stream that this server sends (`ai`'s
`UIMessageChunk`, header `x-vercel-ai-ui-message-stream: v1`), typed as the SDK's own
client validates them (`uiMessageChunkSchema`): one SSE `data:` line each, `[DONE]` last."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# `ai`'s FinishReason
FinishReason = Literal["stop", "length", "content-filter", "tool-calls", "error", "interrupted", "other"]
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "x-vercel-ai-ui-message-stream": "v1"}
DONE_LINE = "data: [DONE]\n\n"


class Chunk(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True)

    def sse(self) -> str:
        # Optional fields are left out rather than sent as null (the SDK's schema takes no nulls
        # there); values inside `data`, `input` and `output` are sent as they are.
        return f"data: {self.model_dump_json(exclude_none=True)}\n\n"


class Start(Chunk):
    type: Literal["start"] = "start"
    message_id: str | None = None
    message_metadata: dict[str, Any] | None = None


class StartStep(Chunk):
    type: Literal["start-step"] = "start-step"


class FinishStep(Chunk):
    type: Literal["finish-step"] = "finish-step"


class TextStart(Chunk):
    type: Literal["text-start"] = "text-start"
    id: str


class TextDelta(Chunk):
    type: Literal["text-delta"] = "text-delta"
    id: str
    delta: str


class SourceDocument(Chunk):
    """As `ai`'s Citation.source of a document (inside `text-end`), or alone."""

    type: Literal["source"] = "source"
    source_type: Literal["document"] = "document"
    id: str
    media_type: str
    title: str
    filename: str | None = None


class TextCitation(Chunk):
    source: SourceDocument
    end_index: int | None = None
    cited_text: str | None = None


class TextEnd(Chunk):
    type: Literal["text-end"] = "text-end"
    id: str
    citations: list[TextCitation] | None = None


class ReasoningStart(Chunk):
    type: Literal["reasoning-start"] = "reasoning-start"
    id: str


class ReasoningDelta(Chunk):
    type: Literal["reasoning-delta"] = "reasoning-delta"
    id: str
    delta: str


class ReasoningEnd(Chunk):
    type: Literal["reasoning-end"] = "reasoning-end"
    id: str


class ToolInputAvailable(Chunk):
    type: Literal["tool-input-available"] = "tool-input-available"
    tool_call_id: str
    tool_name: str
    input: dict[str, Any]
    provider_executed: bool = True  # run by the server: no client answers it with a tool output


class ToolApprovalRequest(Chunk):
    type: Literal["tool-approval-request"] = "tool-approval-request"
    approval_id: str
    tool_call_id: str


class ToolApprovalResponse(Chunk):
    type: Literal["tool-approval-response"] = "tool-approval-response"
    approval_id: str
    approved: bool
    provider_executed: bool = True


class ToolOutputAvailable(Chunk):
    type: Literal["tool-output-available"] = "tool-output-available"
    tool_call_id: str
    output: Any = None
    provider_executed: bool = True


class ToolOutputError(Chunk):
    type: Literal["tool-output-error"] = "tool-output-error"
    tool_call_id: str
    error_text: str
    provider_executed: bool = True


class ToolOutputDenied(Chunk):
    type: Literal["tool-output-denied"] = "tool-output-denied"
    tool_call_id: str


class SourceDocumentChunk(Chunk):
    type: Literal["source-document"] = "source-document"
    source_id: str
    media_type: str
    title: str
    filename: str | None = None


class Data(Chunk):
    """A `data-NAME` part: kept in the message (one per `id`, replaced by a later one of the
    same id) or, `transient`, only handed to the client's `onData`."""

    type: Annotated[str, Field(pattern=r"^data-")]  # "data-" + a name
    id: str | None = None
    data: Any
    transient: bool | None = None


class ErrorChunk(Chunk):
    type: Literal["error"] = "error"
    error_text: str


class Abort(Chunk):
    type: Literal["abort"] = "abort"
    reason: str | None = None


class Finish(Chunk):
    type: Literal["finish"] = "finish"
    finish_reason: FinishReason | None = None
    message_metadata: dict[str, Any] | None = None


AnyChunk = Union[Start, StartStep, FinishStep, TextStart, TextDelta, TextEnd, ReasoningStart, ReasoningDelta,
                 ReasoningEnd, ToolInputAvailable, ToolApprovalRequest, ToolApprovalResponse, ToolOutputAvailable,
                 ToolOutputError, ToolOutputDenied, SourceDocumentChunk, Data, ErrorChunk, Abort, Finish]
