"""Typed write operations, applied in order by `Store.apply` in one transaction.

Every op that touches a conversation names its `owner`, and does nothing (no error) when
that owner has no such conversation: it may have been deleted while a turn was finishing,
and one late write must not fail a whole group commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chat_agent.store.base import EventRecord, History, HistoryItem, TurnRecord, TurnStatus


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
class StartTurn:
    """Stores a new turn; a no-op unless `turn.owner` owns `turn.conversation_id`."""

    turn: TurnRecord


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


Op = (
    CreateConversation
    | DeleteConversation
    | SetTitle
    | AppendEvents
    | PruneEvents
    | AppendHistory
    | UpsertHistoryItem
    | ReplaceHistory
    | StartTurn
    | FinishTurn
    | RecordClientMessageId
)
