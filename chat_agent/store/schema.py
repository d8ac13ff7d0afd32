"""The SQLite schema as numbered migrations, and the code that brings a database up to date.

Rows other than conversations carry no owner of their own (turns excepted, for
`get_turn`): they are reachable only through their conversation, and every query joins
or checks `conversations.owner`. Children reference their conversation with
`ON DELETE CASCADE`, so deleting a conversation deletes everything it owns; each child
table's key starts with `conversation_id`, which keeps those cascades indexed.
"""

from __future__ import annotations

import aiosqlite

from chat_agent.store.base import StoreError

_V1 = (
    """CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        title TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        last_seq INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX conversations_by_owner ON conversations (owner, updated_at DESC)",
    """CREATE TABLE history_items (
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        history TEXT NOT NULL CHECK (history IN ('visible', 'model')),
        pos INTEGER NOT NULL,
        id TEXT NOT NULL,
        data TEXT NOT NULL,
        tokens INTEGER NOT NULL,
        chars INTEGER NOT NULL,
        PRIMARY KEY (conversation_id, history, pos),
        UNIQUE (conversation_id, history, id)
    )""",
    """CREATE TABLE events (
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        seq INTEGER NOT NULL CHECK (seq > 0),
        type TEXT NOT NULL,
        turn_id TEXT,
        frame TEXT NOT NULL,
        stored_at REAL NOT NULL,
        PRIMARY KEY (conversation_id, seq)
    )""",
    # Kept by a trigger so that no way of adding events can leave last_seq behind, and so
    # that an AppendEvents is one statement that batches with every other AppendEvents.
    """CREATE TRIGGER events_raise_conversation AFTER INSERT ON events BEGIN
        UPDATE conversations
        SET last_seq = MAX(last_seq, NEW.seq), updated_at = MAX(updated_at, NEW.stored_at)
        WHERE id = NEW.conversation_id;
    END""",
    """CREATE TABLE turns (
        id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        owner TEXT NOT NULL,
        message_id TEXT NOT NULL,
        status TEXT NOT NULL
            CHECK (status IN ('running', 'complete', 'aborted', 'interrupted', 'error')),
        started_at REAL NOT NULL,
        first_seq INTEGER NOT NULL,
        ended_at REAL,
        stop_reason TEXT,
        usage TEXT
    )""",
    "CREATE INDEX turns_by_conversation ON turns (conversation_id)",
    # Partial: start-up recovery scans only the few turns still running.
    "CREATE INDEX turns_running ON turns (status) WHERE status = 'running'",
    """CREATE TABLE client_message_ids (
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        client_id TEXT NOT NULL,
        PRIMARY KEY (conversation_id, client_id)
    ) WITHOUT ROWID""",
)

# MIGRATIONS[n - 1] takes a database from version n - 1 to version n. Append, never edit.
MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1,)
SCHEMA_VERSION = len(MIGRATIONS)

_VERSION_TABLE = """CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER PRIMARY KEY,
    applied_at INTEGER NOT NULL
)"""

# journal_mode=WAL is stored in the file; the others hold per connection. With WAL,
# synchronous=NORMAL still makes a commit survive a process crash (only an OS crash or
# power loss can drop the last commits), at a fraction of FULL's fsync cost.
PRAGMAS = (
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA foreign_keys = ON",
    "PRAGMA busy_timeout = 5000",
)


async def migrate(db: aiosqlite.Connection) -> int:
    """Apply the missing migrations in one transaction; returns the schema version."""
    # IMMEDIATE takes the write lock first, so two processes opening one new file
    # cannot both decide to create the tables.
    await db.execute("BEGIN IMMEDIATE")
    try:
        await db.execute(_VERSION_TABLE)
        rows = await db.execute_fetchall("SELECT COALESCE(MAX(version), 0) FROM schema_version")
        current = int(list(rows)[0][0])
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"database schema version {current} is newer than this build "
                f"supports ({SCHEMA_VERSION}); upgrade chat-agent"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version - 1]:
                await db.execute(statement)
            await db.execute(
                "INSERT INTO schema_version (version, applied_at)"
                " VALUES (?, CAST(strftime('%s', 'now') AS INTEGER))",
                (version,),
            )
        await db.execute("COMMIT")
    except BaseException:
        await db.rollback()
        raise
    return SCHEMA_VERSION
