"""Typed write operations, applied in order by `Store.apply` in one transaction.

Every op that touches a conversation names its `owner`, and does nothing (no error) when
that owner has no such conversation: it may have been deleted while a turn was finishing,
and one late write must not fail a whole group commit. Memories and quick actions belong
to a user, not to a conversation, and so do files (an upload may be attached to several
conversations and outlives them); `op_scope` names what any op belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chat_agent.store.records import (
    ArtifactVersionRecord,
    EventRecord,
    FileRecord,
    History,
    HistoryItem,
    MemoriesRecord,
    QuickActionRecord,
    TurnRecord,
    TurnStatus,
    VersionDelta,
)


@dataclass(frozen=True, slots=True)
class CreateConversation:
    """Fails the batch (`ConstraintError`) if the id is taken: ids are generated, so a
    repeat is a bug worth hearing about."""

    owner: str
    conversation_id: str
    created_at: float


@dataclass(frozen=True, slots=True)
class DeleteConversation:
    """Deletes the conversation and everything that belongs to it."""

    owner: str
    conversation_id: str


@dataclass(frozen=True, slots=True)
class SetTitle:
    owner: str
    conversation_id: str
    title: str | None


@dataclass(frozen=True, slots=True)
class SetContextOverhead:
    """Tokens a request carries besides the history (system prompt, tools), as last measured."""

    owner: str
    conversation_id: str
    tokens: int


@dataclass(frozen=True, slots=True)
class AppendEvents:
    """Stores events and raises the conversation's `last_seq` and `updated_at`.

    `updated_at` is the activity time; when omitted the store uses its own clock.
    """

    owner: str
    conversation_id: str
    events: tuple[EventRecord, ...]
    updated_at: float | None = None

    def __post_init__(self) -> None:
        # An event filed under the wrong conversation would replay into the wrong stream.
        for event in self.events:
            if event.conversation_id != self.conversation_id:
                raise ValueError(
                    f"event seq {event.seq} belongs to {event.conversation_id!r}, "
                    f"not {self.conversation_id!r}"
                )


@dataclass(frozen=True, slots=True)
class PruneEvents:
    """Deletes events with seq < before_seq; seqs are never reused, `last_seq` stays."""

    owner: str
    conversation_id: str
    before_seq: int


@dataclass(frozen=True, slots=True)
class AppendHistory:
    """Appends after the existing items. Item ids are unique within one history: a
    repeated id fails the batch (`ConstraintError`); use `UpsertHistoryItem` for that."""

    owner: str
    conversation_id: str
    history: History
    items: tuple[HistoryItem, ...]


@dataclass(frozen=True, slots=True)
class UpsertHistoryItem:
    """Replaces the item with the same id where it stands, or appends it."""

    owner: str
    conversation_id: str
    history: History
    item: HistoryItem


@dataclass(frozen=True, slots=True)
class ReplaceHistory:
    """The whole history becomes `items` (a summary, or clear_context with no items)."""

    owner: str
    conversation_id: str
    history: History
    items: tuple[HistoryItem, ...]


@dataclass(frozen=True, slots=True)
class DeleteHistoryItems:
    """Deletes these items of one history (ids it does not hold are skipped): a refused
    exchange taken out of the model-facing history, which other paths never held."""

    owner: str
    conversation_id: str
    history: History
    ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SetLeaf:
    """Makes the path that ends at visible message `leaf_id` active (tree.EMPTY: before the
    first message; None: unset, which reads as the newest message)."""

    owner: str
    conversation_id: str
    leaf_id: str | None


@dataclass(frozen=True, slots=True)
class StartTurn:
    """Stores a new turn; a no-op unless `turn.owner` owns `turn.conversation_id`."""

    turn: TurnRecord


@dataclass(frozen=True, slots=True)
class ContinueTurn:
    """Records that a running turn was continued after a failure at `step` (its completed
    model calls): failing again at the same step, it is closed instead."""

    owner: str
    conversation_id: str
    turn_id: str
    step: int


@dataclass(frozen=True, slots=True)
class FinishTurn:
    owner: str
    conversation_id: str
    turn_id: str
    status: TurnStatus
    stop_reason: str | None
    usage: dict[str, Any] | None
    ended_at: float


@dataclass(frozen=True, slots=True)
class RecordClientMessageId:
    """Remembers a client's message id so a repeat can be ignored; recording twice is fine."""

    owner: str
    conversation_id: str
    client_id: str


@dataclass(frozen=True, slots=True)
class AddArtifactVersion:
    """Appends a version and makes it current; the first version creates the artifact.

    `version.index` must be exactly the artifact's version count + 1 (1 for a new one),
    and `artifact_id` must be the artifact's id once it exists: otherwise
    `ConstraintError`, since the caller's idea of the artifact is wrong.

    `delta`, when given, says how `version.content` derives from an existing version; the
    store may then keep only the delta (a small edit is a small write) or, when a snapshot
    is due, the whole content (see writes.py). Reads always answer the whole content.
    """

    owner: str
    conversation_id: str
    artifact_id: str
    version: ArtifactVersionRecord
    delta: VersionDelta | None = None


@dataclass(frozen=True, slots=True)
class SelectArtifactVersion:
    """Makes version `index` current. Out of 1..version_count: `ConstraintError`. A
    conversation without an artifact has nothing to select: a no-op, like a missing one."""

    owner: str
    conversation_id: str
    index: int


@dataclass(frozen=True, slots=True)
class SetMemories:
    """Replaces the owner's memories as a whole."""

    owner: str
    memories: MemoriesRecord


@dataclass(frozen=True, slots=True)
class DeleteMemories:
    owner: str


@dataclass(frozen=True, slots=True)
class PutQuickAction:
    """Inserts the quick action, or replaces the owner's one with that id, keeping its
    `created_at` (its place in the list). An id owned by someone else: `ConstraintError`."""

    record: QuickActionRecord


@dataclass(frozen=True, slots=True)
class DeleteQuickAction:
    """A no-op if the owner has no quick action with that id."""

    owner: str
    id: str


@dataclass(frozen=True, slots=True)
class AddFile:
    """Stores a file's metadata, and attaches it to `conversation_id` when one is given
    (a no-op for the link if the file's owner has no such conversation). Adding and
    attaching are one op so that a batch can never order the link before its file. A
    repeated id fails the batch (`ConstraintError`): ids are generated."""

    record: FileRecord
    conversation_id: str | None = None


@dataclass(frozen=True, slots=True)
class AttachFile:
    """Links the owner's stored file to the owner's conversation; a no-op if either is
    missing or someone else's, and for a file already attached (it keeps its place).
    The file must be committed already (`Files.save` waits for that before it returns
    an id): a batch may order this before an `AddFile` of another scope."""

    owner: str
    conversation_id: str
    file_id: str
    added_at: float


@dataclass(frozen=True, slots=True)
class MarkCommit:
    """Written with a transaction of the store writer's that no event of it identifies, so
    that whether the transaction was committed can be read back (see StoreWriter's doubts)."""

    writer: str
    n: int


Op = (
    CreateConversation
    | DeleteConversation
    | SetTitle
    | SetContextOverhead
    | AppendEvents
    | PruneEvents
    | AppendHistory
    | UpsertHistoryItem
    | ReplaceHistory
    | DeleteHistoryItems
    | SetLeaf
    | StartTurn
    | ContinueTurn
    | FinishTurn
    | RecordClientMessageId
    | AddArtifactVersion
    | SelectArtifactVersion
    | SetMemories
    | DeleteMemories
    | PutQuickAction
    | DeleteQuickAction
    | AddFile
    | AttachFile
    | MarkCommit
)


def op_scope(op: Op) -> str:
    """What `op` belongs to: its conversation's id, or the user-level row it writes.

    Ops of different scopes never touch the same rows, so a batch can be split by scope
    (to spare the others when one scope's ops break a constraint) or reordered across
    scopes. Conversation ids are generated, so they do not collide with these prefixes.
    """
    match op:
        case StartTurn():
            return op.turn.conversation_id
        case MarkCommit():
            return f"commit:{op.writer}"
        case SetMemories() | DeleteMemories():
            return f"memories:{op.owner}"
        case PutQuickAction():
            return f"quick-action:{op.record.id}"  # ids are unique across owners
        case DeleteQuickAction():
            return f"quick-action:{op.id}"
        case AddFile():
            # Attaching orders it with its conversation's ops (after CreateConversation).
            return op.conversation_id or f"file:{op.record.id}"
    return op.conversation_id
