"""The records a store reads and writes, shared by `Store` (base) and the write ops.

A module of their own so that base can import ops and ops the records, one way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

History = Literal["visible", "model"]
TurnStatus = Literal["running", "complete", "aborted", "interrupted", "error"]
ArtifactType = Literal["text", "code"]
ArtifactSource = Literal["model", "user"]
FileSource = Literal["upload", "attachment", "generated", "code"]


@dataclass(slots=True)
class ConversationRecord:
    id: str
    owner: str
    title: str | None
    created_at: float
    updated_at: float
    last_seq: int  # highest event seq ever stored; pruning never lowers it
    context_overhead: int = 0  # tokens a request carries besides the history, as last measured
    leaf_id: str | None = None  # the last message of the active path (None: no message yet)


@dataclass(slots=True)
class HistoryItem:
    id: str
    data: dict[str, Any]
    tokens: int  # cached so loading a long history needs no recount
    chars: int
    # The tree (see tree.py). Visible: the message it answers or follows (None: the first).
    parent_id: str | None = None
    # Model-facing: the visible message it belongs to, and the items it replaces (a summary,
    # a user message merged into what an aborted turn left) on every path that holds it.
    node: str | None = None
    supersedes: tuple[str, ...] = ()
    # A summary: it stands for everything its path held up to its message (see tree.py).
    base: bool = False
    # The JSON `data` was read from (UTF-8), when it was: a request can send it as it is
    # instead of encoding the message again (the first turn after a conversation is opened).
    raw: bytes | None = field(default=None, compare=False, repr=False)


@dataclass(slots=True)
class HistoryPage:
    """Consecutive items of one history, oldest first, and whether older items exist."""

    items: list[HistoryItem]
    more: bool
    # Visible pages: each message's parent and its place among its siblings (index, count).
    places: dict[str, tuple[str | None, int, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HistorySize:
    """What a history holds, without its items: a conversation that nobody talks to keeps
    only this in memory."""

    count: int = 0
    tokens: int = 0
    chars: int = 0


@dataclass(slots=True)
class EventRecord:
    conversation_id: str
    seq: int
    type: str
    turn_id: str | None
    frame: str  # the exact JSON text clients were sent, replayed verbatim on resume


@dataclass(slots=True)
class TurnRecord:
    id: str
    conversation_id: str
    owner: str
    message_id: str
    status: TurnStatus
    started_at: float
    first_seq: int
    ended_at: float | None = None
    stop_reason: str | None = None
    usage: dict[str, Any] | None = None
    # What a continuation needs to build the turn again (model, tools, prompt options;
    # see sessions/continuation.py), and the step it was last continued at.
    spec: dict[str, Any] | None = None
    continued_step: int | None = None


@dataclass(slots=True)
class ArtifactVersionRecord:
    index: int  # 1-based, in the order the versions were added
    type: ArtifactType
    title: str
    language: str | None  # code only
    content: str
    created_at: float
    source: ArtifactSource  # who wrote it: the model's tool call or the user's canvas edit


@dataclass(frozen=True, slots=True)
class ArtifactVersionInfo:
    """A version without its content: who made it and when."""

    index: int
    title: str
    created_at: float
    source: ArtifactSource


@dataclass(frozen=True, slots=True)
class VersionDelta:
    """How a new version derives from an older one: version `base_index` with `changes`
    applied (`chat_agent.edits`: ascending `(start, end, text)`, offsets into the base)."""

    base_index: int
    changes: tuple[tuple[int, int, str], ...]


@dataclass(slots=True)
class ArtifactRecord:
    """A conversation's one artifact, with only its current version loaded."""

    id: str
    conversation_id: str
    current_index: int
    version_count: int
    current: ArtifactVersionRecord


@dataclass(slots=True)
class MemoriesRecord:
    """A user's reflections; they follow the user across conversations. `version` is the
    stamp of the stored row (None: nothing stored, or not stored yet), new at every write:
    `Store.swap_memories` writes only over the version it was given. It is no part of what
    the memories say, so two records with the same lists and time are equal whatever it is."""

    style_rules: list[str]
    content: list[str]
    updated_at: float
    version: str | None = field(default=None, compare=False)


@dataclass(slots=True)
class QuickActionRecord:
    """A user's saved custom quick action."""

    id: str
    owner: str
    title: str
    prompt: str
    include_reflections: bool
    include_prefix: bool
    include_recent_history: bool
    created_at: float
    updated_at: float


@dataclass(slots=True)
class FileRecord:
    """A stored file's metadata; its bytes are in the blob store under `blob_key`."""

    id: str
    owner: str
    filename: str  # the client's name, cleaned; only ever shown, never a path
    media_type: str  # decided from the bytes
    size: int
    source: FileSource
    width: int | None  # images only
    height: int | None
    blob_key: str
    created_at: float


@dataclass(frozen=True, slots=True)
class Lease:
    """Who owns a live conversation, until when. `epoch` is the fencing token: it goes up
    every time the lease changes hands, so a write fenced with an older epoch is refused."""

    conversation_id: str
    instance: str
    epoch: int
    expires_at: float  # unix seconds, by the database's clock on PostgreSQL


@dataclass
class LiveView:
    """What a `session` of a conversation written elsewhere needs, as of one moment: the
    conversation (its `last_seq`), the turns running then, their frames so far, and the
    newest items of the visible history."""

    record: ConversationRecord
    turns: list[TurnRecord]
    events: list[EventRecord]  # from the first running turn's first seq to `last_seq`
    page: HistoryPage


@dataclass(slots=True)
class SearchHit:
    """A conversation that matches a search, with its best match: a message of any branch
    (`message_id`), or its title (None); `snippet` is the matching text around the words."""

    record: ConversationRecord
    message_id: str | None
    snippet: str
