"""Records and the abstract `Store`: what every storage backend offers.

The server keeps live state in memory and writes every change through one group-commit
writer, so the write side is a single `apply(ops)`; everything else is a read. Every read
takes the caller's `owner` and answers as if another owner's data did not exist.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Self

if TYPE_CHECKING:
    from chat_agent.store.ops import Op

History = Literal["visible", "model"]
TurnStatus = Literal["running", "complete", "aborted", "interrupted", "error"]
ArtifactType = Literal["text", "code"]
ArtifactSource = Literal["model", "user"]
FileSource = Literal["upload", "attachment", "generated", "code"]


class StoreError(Exception):
    """The store cannot do what was asked (not open, schema too new, ...)."""


class ConstraintError(StoreError):
    """An operation broke a constraint (a duplicate id or seq, an invalid value).

    Raised by `apply`; the whole batch was rolled back.
    """


@dataclass(slots=True)
class ConversationRecord:
    id: str
    owner: str
    title: str | None
    created_at: float
    updated_at: float
    last_seq: int  # highest event seq ever stored; pruning never lowers it


@dataclass(slots=True)
class HistoryItem:
    id: str
    data: dict[str, Any]
    tokens: int  # cached so loading a long history needs no recount
    chars: int


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


@dataclass(slots=True)
class ArtifactVersionRecord:
    index: int  # 1-based, in the order the versions were added
    type: ArtifactType
    title: str
    language: str | None  # code only
    content: str
    created_at: float
    source: ArtifactSource  # who wrote it: the model's tool call or the user's canvas edit


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
    """A user's reflections; they follow the user across conversations."""

    style_rules: list[str]
    content: list[str]
    updated_at: float


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


class Store(ABC):
    """One storage backend. `open()` before use, `close()` after; also `async with`."""

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @abstractmethod
    async def open(self) -> None:
        """Create the database and schema if needed (idempotent), migrate if older."""

    @abstractmethod
    async def close(self) -> None:
        """Release the connection; safe to call twice."""

    @abstractmethod
    async def apply(self, ops: Sequence[Op]) -> None:
        """Apply `ops` in order in one transaction: all of them or none (`ConstraintError`)."""

    @abstractmethod
    async def get_conversation(self, owner: str, conversation_id: str) -> ConversationRecord | None:
        """None if it does not exist or belongs to someone else."""

    @abstractmethod
    async def list_conversations(self, owner: str, limit: int = 100) -> list[ConversationRecord]:
        """The owner's conversations, most recently active first."""

    @abstractmethod
    async def load_history(
        self, owner: str, conversation_id: str, history: History
    ) -> list[HistoryItem]:
        """One history of a conversation, oldest first."""

    @abstractmethod
    async def events_after(
        self, owner: str, conversation_id: str, after_seq: int, limit: int | None = None
    ) -> list[EventRecord]:
        """Stored events with seq > after_seq, ascending; at most `limit` of them."""

    @abstractmethod
    async def running_turns(self) -> list[TurnRecord]:
        """Turns still marked running, of every owner: after a crash, these were cut off."""

    @abstractmethod
    async def get_turn(self, owner: str, turn_id: str) -> TurnRecord | None:
        """None if it does not exist or belongs to someone else."""

    @abstractmethod
    async def usage_totals(self, owner: str, conversation_id: str) -> dict[str, int]:
        """Sum of each numeric top-level usage key over the conversation's finished turns."""

    @abstractmethod
    async def has_client_message_id(self, owner: str, conversation_id: str, client_id: str) -> bool:
        """Whether `RecordClientMessageId` stored this id for this conversation."""

    @abstractmethod
    async def get_artifact(self, owner: str, conversation_id: str) -> ArtifactRecord | None:
        """The conversation's artifact with its current version; None if it has none."""

    @abstractmethod
    async def get_artifact_version(
        self, owner: str, conversation_id: str, index: int
    ) -> ArtifactVersionRecord | None:
        """One version by its 1-based index; None if there is no such version."""

    @abstractmethod
    async def get_memories(self, owner: str) -> MemoriesRecord | None:
        """The owner's memories; None if none were ever set (or they were deleted)."""

    @abstractmethod
    async def list_quick_actions(self, owner: str) -> list[QuickActionRecord]:
        """The owner's custom quick actions, oldest first."""

    @abstractmethod
    async def get_quick_action(self, owner: str, id: str) -> QuickActionRecord | None:
        """None if it does not exist or belongs to someone else."""

    @abstractmethod
    async def get_file(self, owner: str, file_id: str) -> FileRecord | None:
        """None if it does not exist or belongs to someone else."""

    @abstractmethod
    async def conversation_files(self, owner: str, conversation_id: str) -> list[FileRecord]:
        """The files attached to the conversation, in the order they were attached."""
