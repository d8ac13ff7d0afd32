"""Persistence for conversations, histories, the event log, turns, the canvas (artifacts
with their versions, memories, custom quick actions), and the metadata of files.

    store = create_store(settings.database_url, settings.data_dir)
    await store.open()
    await store.apply([CreateConversation(owner, conversation_id, created_at=now)])
"""

from __future__ import annotations

from pathlib import Path

from chat_agent.store.base import ConstraintError, FencedOut, Fences, Store, StoreError, StoreUnavailable
from chat_agent.store.ops import (
    AddArtifactVersion,
    AddFile,
    AppendEvents,
    AppendHistory,
    AttachFile,
    CreateConversation,
    DeleteConversation,
    DeleteHistoryItems,
    DeleteMemories,
    DeleteQuickAction,
    ContinueTurn,
    FinishTurn,
    MarkCommit,
    Op,
    PruneEvents,
    PutQuickAction,
    RecordClientMessageId,
    ReplaceHistory,
    SelectArtifactVersion,
    SetContextOverhead,
    SetLeaf,
    SetMemories,
    SetTitle,
    StartTurn,
    UpsertHistoryItem,
    op_scope,
)
from chat_agent.store.records import (
    ArtifactRecord,
    ArtifactSource,
    ArtifactType,
    ArtifactVersionInfo,
    ArtifactVersionRecord,
    ConversationRecord,
    EventRecord,
    FileRecord,
    FileSource,
    History,
    HistoryItem,
    HistoryPage,
    LiveView,
    HistorySize,
    Lease,
    MemoriesRecord,
    QuickActionRecord,
    SearchHit,
    TurnRecord,
    TurnStatus,
    VersionDelta,
)
from chat_agent.store.postgres import PostgresStore, redact
from chat_agent.store.sqlite import SqliteStore
from chat_agent.store.writer import NotStored, StoreWriter

__all__ = [
    "AddArtifactVersion",
    "AddFile",
    "AppendEvents",
    "AppendHistory",
    "ArtifactRecord",
    "ArtifactSource",
    "ArtifactType",
    "ArtifactVersionInfo",
    "ArtifactVersionRecord",
    "AttachFile",
    "ConstraintError",
    "ConversationRecord",
    "CreateConversation",
    "DeleteConversation",
    "DeleteHistoryItems",
    "DeleteMemories",
    "DeleteQuickAction",
    "EventRecord",
    "FencedOut",
    "Fences",
    "FileRecord",
    "FileSource",
    "ContinueTurn",
    "FinishTurn",
    "MarkCommit",
    "History",
    "Lease",
    "HistoryItem",
    "HistoryPage",
    "LiveView",
    "HistorySize",
    "MemoriesRecord",
    "NotStored",
    "Op",
    "PostgresStore",
    "PruneEvents",
    "PutQuickAction",
    "QuickActionRecord",
    "SearchHit",
    "RecordClientMessageId",
    "ReplaceHistory",
    "SelectArtifactVersion",
    "SetContextOverhead",
    "SetLeaf",
    "SetMemories",
    "SetTitle",
    "SqliteStore",
    "StoreWriter",
    "StartTurn",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "TurnRecord",
    "TurnStatus",
    "UpsertHistoryItem",
    "VersionDelta",
    "create_store",
    "op_scope",
]

DEFAULT_FILENAME = "chat-agent.db"
_SQLITE_PREFIX = "sqlite:///"


def create_store(database_url: str | None, data_dir: Path, *, pool_size: int = 10) -> Store:
    """The store a `CHAT_AGENT_DATABASE_URL` names; not yet opened.

    None or empty: `data_dir / "chat-agent.db"`. `sqlite:///rel/path.db` is relative to
    the working directory, `sqlite:////abs/path.db` absolute (SQLAlchemy's convention),
    `sqlite:///:memory:` in memory. `postgresql://` or `postgres://` URLs are libpq's, used
    as they are: `?options=-csearch_path%3Dname` puts the tables in schema `name`.
    """
    url = (database_url or "").strip()
    if not url:
        return SqliteStore(Path(data_dir) / DEFAULT_FILENAME)
    scheme = url.partition(":")[0].lower()
    if scheme in ("postgresql", "postgres") and url[len(scheme) :].startswith("://"):
        return PostgresStore(url, min_size=min(2, pool_size), max_size=pool_size)
    if not url.startswith(_SQLITE_PREFIX) or len(url) == len(_SQLITE_PREFIX):
        raise ValueError(
            f"unsupported database URL {redact(url)!r}: expected sqlite:///path/to/file.db "
            "or postgresql://user@host/database"
        )
    return SqliteStore(url[len(_SQLITE_PREFIX) :])
