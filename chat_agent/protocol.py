"""Every frame of PROTOCOL.md as a typed model: one discriminated union per direction.

Field names are snake_case in Python and camelCase on the wire (the alias generator),
so a browser client sees exactly the names PROTOCOL.md fixes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, TypeAdapter
from pydantic.alias_generators import to_camel

PROTOCOL_VERSION = 1

ErrorCode = Literal[
    "invalid_frame", "unknown_type", "empty_message", "too_large", "busy", "not_found",
    "unauthorized", "invalid_highlight", "no_artifact", "llm_error", "rate_limited", "internal",
    "invalid_attachment",  # ours (PROTOCOL.md leaves codes open): an image or document the server refuses
]
StopReason = Literal["end_turn", "aborted", "max_steps", "max_tokens", "refusal", "error"]
MessageStatus = Literal["complete", "streaming", "aborted", "interrupted", "error"]


class Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True)


# ---- shared shapes -------------------------------------------------------------------

class ToolInfo(Model):
    name: str
    enabled: bool
    reason: str | None = Field(default=None, exclude_if=lambda v: v is None)  # `reason?` in PROTOCOL.md


class ContextInfo(Model):
    tokens: int
    max_tokens: int


class Usage(Model):
    """Tokens of one model call or of a whole turn: the model clients report it, the loop
    adds it up, `done.usage` and the stored turn show it."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def add(self, other: "Usage") -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens

    @property
    def prompt_tokens(self) -> int:
        """Everything the model read, cached or not: the size of the context it saw."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens


class ToolCallRecord(Model):
    """A tool call as the visible history keeps it, so a reloaded UI can redraw its card."""

    tool_id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)
    output: Any = None
    is_error: bool = False
    duration: float | None = None


class VisibleMessage(Model):
    id: str
    role: Literal["user", "assistant"]
    content: str = ""
    created_at: float
    status: MessageStatus = "complete"
    thinking: str | None = None
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    attachments: list[dict[str, Any]] = Field(default_factory=list)


class ArtifactVersion(Model):
    index: int
    type: Literal["text", "code"]
    title: str
    language: str | None = None
    content: str


class ArtifactState(Model):
    id: str
    current_index: int
    version_count: int
    current: ArtifactVersion


# ---- server → client -----------------------------------------------------------------

class ServerFrame(Model):
    conversation_id: str = ""
    seq: int | None = None

    def to_json(self) -> str:
        # Frames outside the event log (pong, answers to malformed frames) carry no seq at all.
        return self.model_dump_json(exclude={"seq"} if self.seq is None else None)


class SessionFrame(ServerFrame):
    type: Literal["session"] = "session"
    protocol_version: int = PROTOCOL_VERSION
    title: str | None = None
    artifact: ArtifactState | None = None
    messages: list[VisibleMessage] = Field(default_factory=list)
    context: ContextInfo
    tools: list[ToolInfo] = Field(default_factory=list)
    running: bool = False


class ContentChunk(ServerFrame):
    type: Literal["content_chunk"] = "content_chunk"
    message_id: str
    content: str


class ThinkingChunk(ServerFrame):
    type: Literal["thinking_chunk"] = "thinking_chunk"
    message_id: str
    content: str


class ToolStart(ServerFrame):
    type: Literal["tool_start"] = "tool_start"
    message_id: str
    tool_id: str
    name: str
    input: dict[str, Any]


class ToolProgress(ServerFrame):
    type: Literal["tool_progress"] = "tool_progress"
    tool_id: str
    elapsed: float
    status: str


class ToolEnd(ServerFrame):
    type: Literal["tool_end"] = "tool_end"
    tool_id: str
    name: str
    output: Any = None
    duration: float
    is_error: bool = False


class ArtifactChunk(ServerFrame):
    type: Literal["artifact_chunk"] = "artifact_chunk"
    tool_id: str
    content: str


class ArtifactFrame(ServerFrame):
    type: Literal["artifact"] = "artifact"
    artifact: ArtifactState


class TitleFrame(ServerFrame):
    type: Literal["title"] = "title"
    title: str


class ContextUpdate(ServerFrame):
    type: Literal["context_update"] = "context_update"
    tokens: int
    max_tokens: int
    summarized: bool = False


class ContextCleared(ServerFrame):
    type: Literal["context_cleared"] = "context_cleared"


class Done(ServerFrame):
    type: Literal["done"] = "done"
    message_id: str
    stop_reason: StopReason
    usage: Usage = Field(default_factory=Usage)


class ErrorFrame(ServerFrame):
    type: Literal["error"] = "error"
    code: ErrorCode
    message: str


class Pong(ServerFrame):
    type: Literal["pong"] = "pong"


AnyServerFrame = Annotated[
    Union[SessionFrame, ContentChunk, ThinkingChunk, ToolStart, ToolProgress, ToolEnd, ArtifactChunk,
          ArtifactFrame, TitleFrame, ContextUpdate, ContextCleared, Done, ErrorFrame, Pong],
    Field(discriminator="type"),
]


# ---- client → server -----------------------------------------------------------------

# What the store can hold (SQLite's INTEGER): a larger number in a client frame is refused
# up front instead of failing deep inside a read or a write.
MAX_STORED_INT = 2**63 - 1
Count = Annotated[StrictInt, Field(ge=0, le=MAX_STORED_INT)]  # every integer a client sends


class ClientModel(Model):
    # Strict scalars: a number where a string belongs is a client bug worth reporting.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True,
                              extra="ignore")


class ImageAttachment(ClientModel):
    type: Literal["image"]
    url: StrictStr | None = None
    upload_id: StrictStr | None = None
    data: StrictStr | None = None
    media_type: StrictStr | None = None


class DocumentAttachment(ClientModel):
    type: Literal["document"]
    content: StrictStr | None = None
    filename: StrictStr | None = None
    upload_id: StrictStr | None = None


Attachment = Annotated[Union[ImageAttachment, DocumentAttachment], Field(discriminator="type")]


class MessageSettings(ClientModel):
    enable_deep_research: StrictBool = False
    web_search: StrictBool = True
    model: StrictStr | None = None
    thinking: StrictBool = False


class Highlight(ClientModel):
    start: Count
    end: Count
    selected_text: StrictStr | None = None


class QuickAction(ClientModel):
    name: Literal["translate", "reading_level", "length", "emojis", "add_comments", "add_logs",
                  "fix_bugs", "port_language", "custom"]
    language: StrictStr | None = None
    level: Literal["child", "teenager", "college", "phd", "pirate"] | None = None
    length: Literal["shortest", "short", "long", "longest"] | None = None
    id: StrictStr | None = None


class Canvas(ClientModel):
    highlight: Highlight | None = None
    quick_action: QuickAction | None = None


class MessageIn(ClientModel):
    type: Literal["message"]
    content: StrictStr = ""
    attachments: list[Attachment] = Field(default_factory=list)
    settings: MessageSettings = Field(default_factory=MessageSettings)
    canvas: Canvas | None = None
    id: StrictStr | None = None


class AbortIn(ClientModel):
    type: Literal["abort"]


class ClearContextIn(ClientModel):
    type: Literal["clear_context"]


class SelectArtifactVersionIn(ClientModel):
    type: Literal["select_artifact_version"]
    index: Count


class EditArtifactIn(ClientModel):
    type: Literal["edit_artifact"]
    content: StrictStr
    title: StrictStr | None = None


class ResumeIn(ClientModel):
    type: Literal["resume"]
    after_seq: Count


class PingIn(ClientModel):
    type: Literal["ping"]


AnyClientFrame = Annotated[
    Union[MessageIn, AbortIn, ClearContextIn, SelectArtifactVersionIn, EditArtifactIn, ResumeIn, PingIn],
    Field(discriminator="type"),
]
CLIENT_TYPES = frozenset({"message", "abort", "clear_context", "select_artifact_version",
                          "edit_artifact", "resume", "ping"})

server_frames: TypeAdapter[AnyServerFrame] = TypeAdapter(AnyServerFrame)
client_frames: TypeAdapter[AnyClientFrame] = TypeAdapter(AnyClientFrame)


def json_schema() -> dict[str, Any]:
    """What `GET /api/protocol` serves: both directions, generated from the models above."""
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "server": server_frames.json_schema(by_alias=True, mode="serialization"),
        "client": client_frames.json_schema(by_alias=True, mode="validation"),
    }
