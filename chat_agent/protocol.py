"""Every frame of PROTOCOL.md as a typed model: one discriminated union per direction.

Field names are snake_case in Python and camelCase on the wire (the alias generator),
so a browser client sees exactly the names PROTOCOL.md fixes.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, TypeAdapter, computed_field,
                      model_validator)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import GenerateJsonSchema

from chat_agent import edits

PROTOCOL_VERSION = 1
# The 1.1 and 1.2 additions this server implements (`session.features`), by PROTOCOL.md's short names.
FEATURES: tuple[str, ...] = ("parts", "paging", "artifact_edit", "approval", "refusal_detail", "ag_ui", "status", "quotas",
                             "continuation", "plan", "review", "tree", "search", "knowledge", "citations", "ai_sdk")

ErrorCode = Literal[
    "invalid_frame", "unknown_type", "empty_message", "too_large", "busy", "not_found",
    "unauthorized", "invalid_highlight", "no_artifact", "llm_error", "rate_limited", "internal",
    "invalid_attachment",  # ours (PROTOCOL.md leaves codes open): an image or document the server refuses
]
StopReason = Literal["end_turn", "aborted", "max_steps", "max_tokens", "refusal", "error"]
MessageStatus = Literal["complete", "streaming", "aborted", "interrupted", "error",
                        "refusal"]  # a refused reply: shown, never sent to the model again


class Model(BaseModel):
    # A field with a default is still always sent, so the schema of what the server sends
    # lists it in `required` (only `exclude_if` fields are left out).
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True,
                              json_schema_serialization_defaults_required=True)


# ---- shared shapes -------------------------------------------------------------------

class ToolInfo(Model):
    name: str
    enabled: bool
    reason: str | None = Field(default=None, exclude_if=lambda v: v is None)  # `reason?` in PROTOCOL.md


class ApprovalInfo(Model):
    """A tool call waiting for the user's `approve` (1.1 "Tool approval")."""

    message_id: str
    tool_id: str
    name: str
    input: dict[str, Any]


PlanStatus = Literal["pending", "in_progress", "done", "skipped"]


class PlanStep(Model):
    """One step of the model's checklist (1.2 "Plans"), as its `update_plan` call gave it."""

    title: str
    status: PlanStatus


ReviewDecision = Literal["revise", "accept"]


class ArtifactTarget(Model):
    """What a review judged: a version of the artifact (1.2 "Review")."""

    kind: Literal["artifact"] = "artifact"
    index: int


class ImageTarget(Model):
    """What a review judged: an image the turn made."""

    kind: Literal["image"] = "image"
    file_id: str


ReviewTarget = Annotated[Union[ArtifactTarget, ImageTarget], Field(discriminator="kind")]


class ReviewInfo(Model):
    """A failed review waiting for the user's `review_decision` (`session.pendingReviews`)."""

    message_id: str
    review_id: str


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


# ---- a visible message: its parts in the order they happened (PROTOCOL 1.1) -----------

def _omit_none(value: Any) -> bool:
    return value is None


class Citation(Model):
    """PROTOCOL 1.2 "Knowledge bases and citations": where a statement of the reply comes from,
    a chunk of one of the user's knowledge documents. `index` is the source's number in the
    turn's search results (the `[n]` a model without citations of its own writes)."""

    index: int
    document_id: str
    filename: str
    page: int | None = Field(default=None, exclude_if=_omit_none)
    quote: str
    # Ours (the contract leaves room): on a stored text part, how many characters of its text
    # the citation follows, so a client redrawing the history puts the mark where it was shown
    # live. A live `citation` frame has none: it follows the text streamed so far.
    offset: int | None = Field(default=None, exclude_if=_omit_none)


class TextPart(Model):
    type: Literal["text"] = "text"
    text: str
    citations: list[Citation] = Field(default_factory=list, exclude_if=lambda v: not v)


class ThinkingPart(Model):
    type: Literal["thinking"] = "thinking"
    text: str


class ToolPart(ToolCallRecord):
    type: Literal["tool"] = "tool"

    def record(self) -> ToolCallRecord:
        return ToolCallRecord.model_validate(self.model_dump(exclude={"type"}))


class AttachmentPart(Model):
    """An attachment's description (`attachments[i]` of 1.0) as a part: its own `type`
    ("image" or "document") is `kind` here, since `type` names the part."""

    # Descriptions are open-ended (an older or newer server may add keys): keep what is there.
    model_config = ConfigDict(extra="allow")  # merged with Model's
    type: Literal["attachment"] = "attachment"
    kind: Literal["image", "document"]
    file_id: str | None = Field(default=None, exclude_if=_omit_none)
    url: str | None = Field(default=None, exclude_if=_omit_none)
    filename: str | None = Field(default=None, exclude_if=_omit_none)
    media_type: str | None = Field(default=None, exclude_if=_omit_none)
    width: int | None = Field(default=None, exclude_if=_omit_none)
    height: int | None = Field(default=None, exclude_if=_omit_none)
    size: int | None = Field(default=None, exclude_if=_omit_none)
    parts: int | None = Field(default=None, exclude_if=_omit_none)  # a document's pages or sections
    unit: str | None = Field(default=None, exclude_if=_omit_none)
    chars: int | None = Field(default=None, exclude_if=_omit_none)

    @classmethod
    def of(cls, description: dict[str, Any]) -> "AttachmentPart":
        kind = description.get("type")
        return cls.model_validate({**{k: v for k, v in description.items() if k != "type"}, "kind": kind})

    def description(self) -> dict[str, Any]:
        """The 1.0 form: `type` is the attachment's kind."""
        return {"type": self.kind, **self.model_dump(mode="json", exclude={"type", "kind"})}


class ReviewPart(Model):
    """A review of what the reply made (1.2 "Review"), where it happened in the reply; with
    the user's answer once a review that asked for one got it (or was accepted for them)."""

    type: Literal["review"] = "review"
    review_id: str
    target: ReviewTarget
    passed: bool
    score: float
    feedback: str
    suggestions: list[str] = Field(default_factory=list)
    revision: int = 0
    decision: ReviewDecision | None = Field(default=None, exclude_if=_omit_none)


Part = Annotated[Union[TextPart, ThinkingPart, ToolPart, AttachmentPart, ReviewPart], Field(discriminator="type")]
PART_SEPARATOR = "\n\n"  # `content` (and `thinking`) join their parts with a blank line


def _legacy_parts(data: dict[str, Any]) -> list[Any]:
    """Parts for a message stored (or built) without them, from the 1.0 fields: attachments,
    thinking, tools, then the text (1.0 did not record their order)."""
    parts: list[Any] = [AttachmentPart.of(a) for a in data.get("attachments") or []]
    if data.get("thinking"):
        parts.append(ThinkingPart(text=data["thinking"]))
    for call in data.get("toolCalls", data.get("tool_calls")) or []:
        parts.append(ToolPart.model_validate(ToolCallRecord.model_validate(call).model_dump()))
    if data.get("content"):
        parts.append(TextPart(text=data["content"]))
    return parts


class BranchPlace(Model):
    index: int = 1  # 1-based
    count: int = 1


class VisibleMessage(Model):
    """A message of the visible history. `parts` is the message; `content`, `thinking`,
    `toolCalls` and `attachments` are the 1.0 views of it, derived, so they cannot disagree."""

    id: str
    role: Literal["user", "assistant"]
    created_at: float
    status: MessageStatus = "complete"
    parts: list[Part] = Field(default_factory=list)
    # PROTOCOL 1.2 trees: the message it answers or follows (None: the first), its place among
    # the messages that share that parent and role, and (assistant) the artifact version
    # current when it ended.
    parent_id: str | None = None
    branch: BranchPlace = Field(default_factory=lambda: BranchPlace())
    artifact_index: int | None = Field(default=None, exclude_if=_omit_none)

    @model_validator(mode="before")
    @classmethod
    def _parts_from_legacy_fields(cls, data: Any) -> Any:
        # Rows stored before parts existed, and messages built from text and attachments.
        if isinstance(data, dict) and "parts" not in data:
            return {**data, "parts": _legacy_parts(data)}
        return data

    def _texts(self, kind: type[TextPart] | type[ThinkingPart]) -> list[str]:
        return [part.text for part in self.parts if isinstance(part, kind)]

    @computed_field
    @property
    def content(self) -> str:
        return PART_SEPARATOR.join(self._texts(TextPart))

    @computed_field
    @property
    def thinking(self) -> str | None:
        return PART_SEPARATOR.join(self._texts(ThinkingPart)) or None

    @computed_field
    @property
    def tool_calls(self) -> list[ToolCallRecord]:
        return [part.record() for part in self.parts if isinstance(part, ToolPart)]

    @computed_field
    @property
    def attachments(self) -> list[dict[str, Any]]:
        return [part.description() for part in self.parts if isinstance(part, AttachmentPart)]


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

SeqSent = Literal["always", "sometimes", "never"]


def _seq_schema(schema: dict[str, Any], cls: type) -> None:
    """`seq` is never null on the wire (to_json leaves it out instead): an integer that every
    frame of the event log has, an `error` sometimes, a `pong` never."""
    properties, required = schema.get("properties", {}), schema.get("required", [])
    if "seq" not in properties:
        return
    properties["seq"] = {"type": "integer", "minimum": 0}
    if cls.seq_sent != "always":
        required.remove("seq")
    if cls.seq_sent == "never":
        del properties["seq"]


class ServerFrame(Model):
    model_config = ConfigDict(json_schema_extra=_seq_schema)
    seq_sent: ClassVar[SeqSent] = "always"

    conversation_id: str = ""
    seq: int | None = None

    def to_json(self) -> str:
        # Frames outside the event log (pong, answers to malformed frames) carry no seq at all.
        return self.model_dump_json(exclude={"seq"} if self.seq is None else None)


class SessionFrame(ServerFrame):
    type: Literal["session"] = "session"
    protocol_version: int = PROTOCOL_VERSION
    features: list[str] = Field(default_factory=lambda: list(FEATURES))
    title: str | None = None
    artifact: ArtifactState | None = None
    messages: list[VisibleMessage] = Field(default_factory=list)  # the newest 50 at most
    more_before: str | None = None  # the oldest message sent when older ones exist (1.1 paging)
    context: ContextInfo
    tools: list[ToolInfo] = Field(default_factory=list)
    running: bool = False
    pending_approvals: list[ApprovalInfo] = Field(default_factory=list)  # asked and not answered yet
    plan: list[PlanStep] | None = None  # 1.2 "Plans": the running or last turn's latest steps
    pending_reviews: list[ReviewInfo] = Field(default_factory=list)  # 1.2 "Review": asked and not answered yet
    leaf_id: str | None = None  # the last message of the active path (1.2 trees)
    # Ours (PROTOCOL.md leaves fields open): the models `settings.model` may name, the server's
    # default first, so that a client can offer a choice.
    models: list[str] = Field(default_factory=list)
    # Ours (PROTOCOL.md leaves fields open): a line a client shows above the conversation, such
    # as that the replies come from the offline demo model. Sent only when there is one.
    notice: str | None = Field(default=None, exclude_if=_omit_none)


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


class ApprovalRequest(ServerFrame):
    """A tool call that waits for the user before it runs; comes after its `tool_start`."""

    type: Literal["approval_request"] = "approval_request"
    message_id: str
    tool_id: str
    name: str
    input: dict[str, Any]


class ReviewFrame(ServerFrame):
    """PROTOCOL 1.2 "Review": the reviewer's verdict on what the turn made. `revision` counts
    the revisions before it (0: the first result)."""

    type: Literal["review"] = "review"
    message_id: str
    review_id: str
    target: ReviewTarget
    passed: bool
    score: float = Field(ge=0, le=1)
    feedback: str
    suggestions: list[str] = Field(default_factory=list)
    revision: int = 0


class ReviewRequest(ServerFrame):
    """A failed review that waits for the user's `review_decision`; comes after its `review`."""

    type: Literal["review_request"] = "review_request"
    message_id: str
    review_id: str


class ReviewDecided(ServerFrame):
    """Ours (PROTOCOL.md leaves it open): a `review_request` got its answer, from any socket,
    or was accepted for the user (timed out, aborted, or its turn was ended by a server
    failure): every client stops asking. `reason` says why it was accepted without the user."""

    type: Literal["review_decision"] = "review_decision"
    message_id: str
    review_id: str
    decision: ReviewDecision
    message: str | None = Field(default=None, exclude_if=_omit_none)
    reason: Literal["timed_out", "aborted", "interrupted"] | None = Field(default=None, exclude_if=_omit_none)


class ArtifactChunk(ServerFrame):
    type: Literal["artifact_chunk"] = "artifact_chunk"
    tool_id: str
    content: str


class ArtifactFrame(ServerFrame):
    type: Literal["artifact"] = "artifact"
    artifact: ArtifactState


class ArtifactChange(Model):
    """Characters `start` to `end` of the base version (end exclusive) become `text`. Offsets
    count Unicode code points, like `message.canvas.highlight` (Python's str indices): in
    JavaScript, index `Array.from(content)`, not the UTF-16 string."""

    start: int = Field(ge=0)
    end: int = Field(ge=0)
    text: str


class ArtifactEdit(ServerFrame):
    """PROTOCOL 1.1: version `index` of artifact `artifactId` is version `baseIndex` with
    `changes` applied in order (ascending, non-overlapping, offsets into the base, in Unicode
    code points). It becomes the current and the last version (`versionCount` = `index`);
    `title` and `language` are sent only when they changed, the type never changes in an edit.
    Sent instead of `artifact` when a new version derives from the current one and its changes
    are smaller than its content. A client whose current version is not `baseIndex` fetches
    version `index` over HTTP."""

    type: Literal["artifact_edit"] = "artifact_edit"
    artifact_id: str
    base_index: int
    index: int
    changes: list[ArtifactChange]
    title: str | None = Field(default=None, exclude_if=_omit_none)
    language: str | None = Field(default=None, exclude_if=_omit_none)

    def applies_to(self, state: ArtifactState | None) -> bool:
        return state is not None and state.id == self.artifact_id and state.current_index == self.base_index

    def apply(self, state: ArtifactState) -> ArtifactState:
        """The artifact after this edit, from the state whose current version is the base.
        Raises edits.EditError when the changes do not fit (check `applies_to` first)."""
        if not self.applies_to(state):
            raise edits.EditError(f"the edit is based on version {self.base_index} of {self.artifact_id}, "
                                  f"not on version {state.current_index} of {state.id}")
        base = state.current
        content = edits.apply(base.content, ((c.start, c.end, c.text) for c in self.changes))
        current = ArtifactVersion(index=self.index, type=base.type, title=self.title or base.title,
                                  language=self.language or base.language, content=content)
        return ArtifactState(id=state.id, current_index=self.index, version_count=self.index, current=current)


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
    # 1.1 "Refusals say why": the API's explanation of a refusal, when it gives one.
    detail: str | None = Field(default=None, exclude_if=_omit_none)


class ErrorFrame(ServerFrame):
    seq_sent: ClassVar[SeqSent] = "sometimes"  # not on answers to a malformed frame
    type: Literal["error"] = "error"
    code: ErrorCode
    message: str
    # `rate_limited` (PROTOCOL 1.2 "Quotas"): seconds until the refused action may succeed.
    retry_after: int | None = Field(default=None, exclude_if=_omit_none)


StatusState = Literal["waiting_model", "retrying", "store_unavailable", "resuming"]


class StatusFrame(ServerFrame):
    """PROTOCOL 1.2 "Live status": what a turn waits on while its clients would otherwise see
    silence (no byte from the model yet, a model call tried again...). Informational: outside
    the event log (no `seq`), never stored, never replayed; the next one replaces it."""

    seq_sent: ClassVar[SeqSent] = "never"
    type: Literal["status"] = "status"
    message_id: str | None = Field(default=None, exclude_if=_omit_none)  # the reply it is about
    state: StatusState
    detail: str  # for people: why, and which attempt when retrying
    elapsed: float  # seconds since the turn began waiting on it


class HistoryFrame(ServerFrame):
    """The active path changed (`switch_branch`, or a regenerate or an edit that starts a
    branch): its newest messages, as `session` sends them."""

    type: Literal["history"] = "history"
    leaf_id: str | None
    messages: list[VisibleMessage] = Field(default_factory=list)
    more_before: str | None = None


class CitationFrame(ServerFrame):
    """A citation of the text streamed so far of `messageId` (PROTOCOL 1.2): it belongs to the
    reply's text part being written, as `citations` of that part once stored."""

    type: Literal["citation"] = "citation"
    message_id: str
    citation: Citation


class Pong(ServerFrame):
    seq_sent: ClassVar[SeqSent] = "never"
    type: Literal["pong"] = "pong"


AnyServerFrame = Annotated[
    Union[SessionFrame, ContentChunk, ThinkingChunk, ToolStart, ToolProgress, ToolEnd, ApprovalRequest,
          ReviewFrame, ReviewRequest, ReviewDecided, ArtifactChunk, ArtifactFrame, ArtifactEdit, TitleFrame, ContextUpdate,
          ContextCleared, Done, ErrorFrame, StatusFrame, HistoryFrame, CitationFrame, Pong],
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


class ReviewSettings(ClientModel):
    enabled: StrictBool = True
    max_revisions: Annotated[StrictInt, Field(ge=0, le=3)] = 1
    decision: Literal["auto", "ask"] = "auto"


class ClientTool(ClientModel):
    """Ours (AG-UI's `tools`): a tool the client runs itself. The model is offered it with its
    JSON Schema; a call waits for the client's `tool_result`."""

    name: Annotated[StrictStr, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]
    description: Annotated[StrictStr, Field(max_length=10_000)] = ""
    parameters: dict[str, Any] | None = None  # JSON Schema of the input; none: no input


class ContextItem(ClientModel):
    """Ours (AG-UI's `context`): something the client tells the model for this turn."""

    description: Annotated[StrictStr, Field(max_length=1_000)]
    value: Annotated[StrictStr, Field(max_length=100_000)]


class MessageSettings(ClientModel):
    enable_deep_research: StrictBool = False
    web_search: StrictBool = True
    model: StrictStr | None = None
    thinking: StrictBool = False
    # Tools that wait for the user's approval in this turn, besides the server's own list.
    require_approval: list[StrictStr] = Field(default_factory=list, max_length=256)
    # 1.2 "Review": whether a reviewer judges what the turn made; None: the server's default.
    review: ReviewSettings | None = None
    # Knowledge collections the agent may search in this turn (`search_knowledge`).
    knowledge: list[StrictStr] = Field(default_factory=list, max_length=64)
    # Ours: tools the client runs (answered with `tool_result`), and what it tells the model.
    client_tools: list[ClientTool] = Field(default_factory=list, max_length=64)
    context: list[ContextItem] = Field(default_factory=list, max_length=64)


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
    edit_of: StrictStr | None = None  # 1.2 trees: a user message this one is a new version of


class RegenerateIn(ClientModel):
    """Answer again the user message that `messageId` (an assistant message; default: the last
    one of the active path) answered. `settings` and `id` as a message's (ours)."""

    type: Literal["regenerate"]
    message_id: StrictStr | None = None
    settings: MessageSettings = Field(default_factory=MessageSettings)
    id: StrictStr | None = None


class RenameIn(ClientModel):
    """Ours (PROTOCOL.md leaves room): renames the conversation; a `title` frame follows. What
    `PATCH /api/conversations/{id}` sends to the instance that owns the conversation."""

    type: Literal["rename"]
    title: Annotated[StrictStr, Field(min_length=1, max_length=200)]


class SwitchBranchIn(ClientModel):
    type: Literal["switch_branch"]
    message_id: StrictStr


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


class ApproveIn(ClientModel):
    type: Literal["approve"]
    tool_id: StrictStr
    approved: StrictBool
    message: StrictStr | None = Field(default=None, max_length=10_000)


class ReviewDecisionIn(ClientModel):
    type: Literal["review_decision"]
    review_id: StrictStr
    decision: ReviewDecision
    message: StrictStr | None = Field(default=None, max_length=10_000)


class ToolResultIn(ClientModel):
    """Ours: the result of a call to one of the client's tools (`settings.clientTools`)."""

    type: Literal["tool_result"]
    tool_id: StrictStr
    content: Annotated[StrictStr, Field(max_length=1_000_000)]
    is_error: StrictBool = False


class ResumeIn(ClientModel):
    type: Literal["resume"]
    after_seq: Count


class PingIn(ClientModel):
    type: Literal["ping"]


AnyClientFrame = Annotated[
    Union[MessageIn, AbortIn, ApproveIn, ReviewDecisionIn, ClearContextIn, SelectArtifactVersionIn, EditArtifactIn, ResumeIn,
          PingIn, RegenerateIn, SwitchBranchIn, RenameIn, ToolResultIn],
    Field(discriminator="type"),
]
CLIENT_TYPES = frozenset({"message", "abort", "approve", "review_decision", "clear_context", "select_artifact_version",
                          "edit_artifact", "resume", "ping", "regenerate", "switch_branch", "rename",
                          "tool_result"})

server_frames: TypeAdapter[AnyServerFrame] = TypeAdapter(AnyServerFrame)
client_frames: TypeAdapter[AnyClientFrame] = TypeAdapter(AnyClientFrame)


class _ProtocolSchema(GenerateJsonSchema):
    def field_title_should_be_set(self, schema: Any) -> bool:
        # "Conversationid" and the like: code generators would make a type of each
        return False

    def default_schema(self, schema: Any) -> dict[str, Any]:
        json_schema = super().default_schema(schema)
        if self.mode == "serialization":
            # The server always sends the field, so a default says nothing; and a schema with
            # a default but no type (`Any`) reads as an object to json-schema-to-typescript.
            json_schema.pop("default", None)
        return json_schema


def json_schema() -> dict[str, Any]:
    """What `GET /api/protocol` serves: one draft 2020-12 document, both directions as
    discriminated unions in its `$defs`, generated from the models above. What the server
    sends is described as serialized (every field it always sends is required), what a
    client sends as validated (fields with a default may be left out)."""
    unions, defs = TypeAdapter.json_schemas(
        [("ServerFrame", "serialization", server_frames), ("ClientFrame", "validation", client_frames)],
        by_alias=True, ref_template="#/$defs/{model}", schema_generator=_ProtocolSchema)
    definitions = defs["$defs"]
    for (name, _mode), union in unions.items():
        definitions[name] = {"title": name, **union}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "ChatAgentFrame",
        "description": "A frame of the chat-agent WebSocket protocol, in either direction.",
        "protocolVersion": PROTOCOL_VERSION,  # an annotation: validators ignore unknown keywords
        "anyOf": [{"$ref": "#/$defs/ServerFrame"}, {"$ref": "#/$defs/ClientFrame"}],
        "$defs": definitions,
    }
