"""The abstract `Store` and its errors: what every storage backend offers.

The server keeps live state in memory and writes every change through one group-commit
writer, so the write side is a single `apply(ops)`; everything else is a read. Every read
takes the caller's `owner` and answers as if another owner's data did not exist.

Several instances may share one database: a conversation is written by the instance that
holds its lease, and `apply` fences each conversation's writes with the lease's epoch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Self

from chat_agent.store.ops import Op
from chat_agent.store.records import (
    ArtifactRecord,
    ArtifactVersionInfo,
    ArtifactVersionRecord,
    ConversationRecord,
    EventRecord,
    FileRecord,
    History,
    HistoryItem,
    HistoryPage,
    HistorySize,
    Lease,
    LiveView,
    MemoriesRecord,
    QuickActionRecord,
    SearchHit,
    TurnRecord,
)

if TYPE_CHECKING:  # tree.py reads through reads.py, which raises this module's errors
    from chat_agent.store.tree import Tree


class StoreError(Exception):
    """The store cannot do what was asked (not open, schema too new, ...)."""


class StoreUnavailable(StoreError):
    """The store cannot be reached or cannot write right now (a cut connection, a full disk):
    what failed may succeed when tried again later."""


class ConstraintError(StoreError):
    """An operation broke a constraint (a duplicate id or seq, an invalid value).

    Raised by `apply`; the whole batch was rolled back.
    """


class FencedOut(StoreError):
    """`apply` was fenced with a lease that is no longer held: another instance took the
    conversation over since. The whole batch was rolled back; `conversation_ids` are the
    conversations whose lease changed hands."""

    def __init__(self, conversation_ids: Sequence[str]):
        self.conversation_ids = tuple(sorted(set(conversation_ids)))
        super().__init__(f"the lease of {', '.join(self.conversation_ids)} changed hands")


Fences = Mapping[str, tuple[str, int]]  # conversation id -> (instance, epoch) its writes need


class Store(ABC):
    """One storage backend. `open()` before use, `close()` after; also `async with`."""

    kind = "custom"  # what `GET /health` says it is

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
    async def apply(self, ops: Sequence[Op], fences: Fences | None = None, *, busy: bool = False) -> None:
        """Apply `ops` in order in one transaction: all of them or none (`ConstraintError`).

        `fences` maps conversation ids to the `(instance, epoch)` of the lease the writer
        holds: in the same transaction, each one's lease row must still be exactly that
        (expiry is not checked: only a takeover fences out), else nothing is applied and
        `FencedOut` names those that failed. `busy` says the event loop is busy: a store
        that would hand the work to a thread may do it on the loop instead."""

    def apply_now(self, ops: Sequence[Op], fences: Fences | None = None) -> bool:
        """As `apply`, on the caller's thread and step, if the store can do it without waiting
        for anything (SQLite with its write lock free): True once committed, False if it did
        not try or met a lock (nothing applied); raises as `apply` for a commit that failed
        (nothing applied). A store that waits on a network never can (the default)."""
        return False

    @abstractmethod
    async def claim_lease(self, conversation_id: str, instance: str, ttl: float) -> Lease | None:
        """Takes or keeps the conversation's lease for `ttl` seconds: when it is free (never
        claimed, or released), expired, or already `instance`'s. The epoch goes up by one
        when it changes hands and stays when its holder claims it again. None when another
        instance holds it unexpired. Atomic: of concurrent claimers, exactly one wins."""

    @abstractmethod
    async def renew_leases(self, instance: str, ttl: float, conversation_ids: Sequence[str]) -> list[Lease]:
        """Extends to now + `ttl` each of these leases that `instance` still holds, expired or
        not (one statement); returns them. One that expired while nobody claimed it is kept,
        at its epoch: its holder was only cut off, and what it wrote meanwhile still goes in."""

    @abstractmethod
    async def release_lease(self, conversation_id: str, instance: str, epoch: int) -> None:
        """Frees the lease if it is still `(instance, epoch)`; anyone may claim it at once."""

    @abstractmethod
    async def get_lease(self, conversation_id: str) -> Lease | None:
        """The lease's holder, expired or not; None when free (never claimed, or released)."""

    @abstractmethod
    async def expired_leases(self, limit: int = 100) -> list[Lease]:
        """Held leases whose time ran out (their holder stopped renewing), oldest first."""

    @abstractmethod
    async def live_instances(self) -> list[str]:
        """The instances holding an unexpired lease, sorted."""

    @abstractmethod
    async def get_conversation(self, owner: str, conversation_id: str) -> ConversationRecord | None:
        """None if it does not exist or belongs to someone else."""

    @abstractmethod
    async def conversation_taken(self, conversation_id: str) -> bool:
        """Whether a conversation of anyone has this id (a client naming a new one, AG-UI's
        threadId, must not land on someone else's)."""

    @abstractmethod
    async def list_conversations(
        self,
        owner: str,
        limit: int = 50,
        *,
        after: tuple[float, str] | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> list[ConversationRecord]:
        """The owner's conversations, most recently active first: `updated_at` descending,
        ties by `id` descending. A keyset page: only those that sort after `after` (the
        `(updated_at, id)` of the last one of the previous page), with `since < updated_at
        <= until` where given."""

    @abstractmethod
    async def load_history(
        self, owner: str, conversation_id: str, history: History, leaf: str | None = None
    ) -> list[HistoryItem]:
        """One history of a conversation, oldest first: every visible message of every branch;
        the model-facing history of the path that ends at `leaf` (the active path when None,
        the empty path for `tree.EMPTY`), see tree.py."""

    @abstractmethod
    async def history_page(
        self, owner: str, conversation_id: str, history: History, before: str | None, limit: int,
        leaf: str | None = None,
    ) -> HistoryPage | None:
        """At most `limit` items just before the item with id `before` (the newest ones when
        None), oldest first. Visible: of the path that ends at `leaf` (the active path when
        None), each with its parent and branch place. None when `before` is not an item of that
        history or path, `leaf` not a message (or the conversation is not the owner's)."""

    @abstractmethod
    async def history_size(self, owner: str, conversation_id: str, history: History) -> HistorySize:
        """How many items one history holds and their tokens and characters (zeros when the
        conversation is not the owner's); the model-facing one: of the active path."""

    @abstractmethod
    async def search_conversations(self, owner: str, terms: Sequence[str], limit: int,
                                   offset: int = 0) -> list[SearchHit]:
        """The owner's conversations whose title or messages (of every branch) hold all of
        `terms` (words), best match first (ties by id), one hit per conversation: `limit`
        of them after the first `offset`."""

    @abstractmethod
    async def tree(self, owner: str, conversation_id: str) -> Tree | None:
        """The visible messages' tree and active leaf; None if the conversation is not the owner's."""

    @abstractmethod
    async def events_after(
        self, owner: str, conversation_id: str, after_seq: int, limit: int | None = None
    ) -> list[EventRecord]:
        """Stored events with seq > after_seq, ascending; at most `limit` of them."""

    @abstractmethod
    async def live_view(self, owner: str, conversation_id: str, limit: int) -> LiveView | None:
        """The conversation, its running turns, their frames and the newest `limit` visible
        items, all read in one snapshot of the store; None if it does not exist for `owner`."""

    @abstractmethod
    async def commit_marked(self, writer: str, n: int) -> bool:
        """Whether the transaction that wrote MarkCommit(writer, n) was committed."""

    @abstractmethod
    async def running_turns(self, conversation_id: str | None = None) -> list[TurnRecord]:
        """Turns still marked running, of every owner (or of one conversation): after a crash
        or a write that failed, these were cut off."""

    @abstractmethod
    async def get_turn(self, owner: str, turn_id: str) -> TurnRecord | None:
        """None if it does not exist or belongs to someone else."""

    @abstractmethod
    async def usage_totals(self, owner: str, conversation_id: str) -> dict[str, int]:
        """Sum of each numeric top-level usage key over the conversation's finished turns."""

    @abstractmethod
    async def tokens_since(self, owner: str, since: float) -> int:
        """Every token (`*Tokens` of usage) of the owner's turns that ended at or after
        `since`, in all their conversations: what the owner spent of a quota."""

    @abstractmethod
    async def running_turn_count(self, owner: str) -> int:
        """How many of the owner's turns are running now (on any instance)."""

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
    async def list_artifact_versions(self, owner: str, conversation_id: str) -> list[ArtifactVersionInfo]:
        """Every version of the conversation's artifact, oldest first, without their content."""

    @abstractmethod
    async def get_memories(self, owner: str) -> MemoriesRecord | None:
        """The owner's memories; None if none were ever set (or they were deleted)."""

    @abstractmethod
    async def swap_memories(self, owner: str, record: MemoriesRecord, expected: str | None) -> MemoriesRecord | None:
        """Compare-and-set: stores `record` as the owner's memories only if the stored ones
        are still at version `expected` (None: only if none are stored), in one atomic
        statement. Returns the record as stored, with its new version; None when another
        write came first (read them again, and decide again)."""

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
