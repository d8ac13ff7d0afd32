"""The SQLite schema as numbered migrations, and the code that brings a database up to date.

Rows of a conversation carry no owner of their own (turns excepted, for `get_turn`):
they are reachable only through their conversation, and every query joins or checks
`conversations.owner`. Children reference their conversation with `ON DELETE CASCADE`,
so deleting a conversation deletes everything it owns; each child table's key starts
with `conversation_id`, which keeps those cascades indexed. Memories and quick actions
belong to a user, not a conversation, and carry their `owner` themselves; so do files,
which conversations link to.
"""

from __future__ import annotations

import sqlite3

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

# Canvas: artifacts, their versions, memories, custom quick actions.
_V2 = (
    # The artifact row is small and rewritten on every change; each version's content is
    # written once, in its own row, and a read of the current version touches only it.
    # version_count = current_index = 0 exists only inside the transaction that adds the
    # first version (see writes.py).
    """CREATE TABLE artifacts (
        conversation_id TEXT PRIMARY KEY REFERENCES conversations (id) ON DELETE CASCADE,
        id TEXT NOT NULL,
        current_index INTEGER NOT NULL,
        version_count INTEGER NOT NULL,
        CHECK (current_index BETWEEN 1 AND version_count
               OR current_index = 0 AND version_count = 0)
    )""",
    """CREATE TABLE artifact_versions (
        conversation_id TEXT NOT NULL
            REFERENCES artifacts (conversation_id) ON DELETE CASCADE,
        idx INTEGER NOT NULL,
        type TEXT NOT NULL CHECK (type IN ('text', 'code')),
        title TEXT NOT NULL,
        language TEXT,
        content TEXT NOT NULL,
        created_at REAL NOT NULL,
        source TEXT NOT NULL CHECK (source IN ('model', 'user')),
        PRIMARY KEY (conversation_id, idx)
    )""",
    # Versions are numbered 1, 2, 3, ... with no gap: a caller that thinks it is adding
    # version 4 when the store holds 4 has lost track, and must hear about it.
    """CREATE TRIGGER artifact_versions_in_order BEFORE INSERT ON artifact_versions
    WHEN NEW.idx IS NOT
        (SELECT version_count + 1 FROM artifacts WHERE conversation_id = NEW.conversation_id)
    BEGIN
        SELECT RAISE(ABORT, 'artifact version index must be version_count + 1');
    END""",
    # As with events, a trigger keeps the counters, so no way of adding a version can
    # leave them behind; a new version is always the current one.
    """CREATE TRIGGER artifact_versions_raise_artifact AFTER INSERT ON artifact_versions
    BEGIN
        UPDATE artifacts SET version_count = NEW.idx, current_index = NEW.idx
        WHERE conversation_id = NEW.conversation_id;
    END""",
    """CREATE TRIGGER artifacts_keep_id BEFORE UPDATE OF id ON artifacts
    WHEN NEW.id IS NOT OLD.id
    BEGIN
        SELECT RAISE(ABORT, 'a conversation has one artifact: its id cannot change');
    END""",
    """CREATE TABLE memories (
        owner TEXT PRIMARY KEY,
        style_rules TEXT NOT NULL,
        content TEXT NOT NULL,
        updated_at REAL NOT NULL
    )""",
    """CREATE TABLE quick_actions (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        title TEXT NOT NULL,
        prompt TEXT NOT NULL,
        include_reflections INTEGER NOT NULL,
        include_prefix INTEGER NOT NULL,
        include_recent_history INTEGER NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    )""",
    "CREATE INDEX quick_actions_by_owner ON quick_actions (owner, created_at)",
    # Ids are unique across owners, so a put of someone else's id would take their row
    # over; refusing any change of owner makes that impossible whatever the statement.
    """CREATE TRIGGER quick_actions_keep_owner BEFORE UPDATE OF owner ON quick_actions
    WHEN NEW.owner IS NOT OLD.owner
    BEGIN
        SELECT RAISE(ABORT, 'quick action id belongs to another owner');
    END""",
)

# Files: uploads, attachments, generated images, what code wrote. A file belongs to its
# owner, not to a conversation: one upload may be attached to several conversations, and
# deleting a conversation deletes only its links. The bytes live in the blob store
# (chat_agent.blobs) under blob_key, kept here so the key layout may change later.
_V3 = (
    """CREATE TABLE files (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        filename TEXT NOT NULL,
        media_type TEXT NOT NULL,
        size INTEGER NOT NULL CHECK (size >= 0),
        source TEXT NOT NULL CHECK (source IN ('upload', 'attachment', 'generated', 'code')),
        width INTEGER,
        height INTEGER,
        blob_key TEXT NOT NULL,
        created_at REAL NOT NULL,
        CHECK ((width IS NULL) = (height IS NULL))
    )""",
    # A rowid table: ties in added_at are read back in insertion (rowid) order.
    """CREATE TABLE conversation_files (
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        file_id TEXT NOT NULL REFERENCES files (id),
        added_at REAL NOT NULL,
        PRIMARY KEY (conversation_id, file_id)
    )""",
)

# What a request carries besides the history (system prompt, tool schemas), as the API last
# measured it: kept so a conversation's token count is the same after a reload or a restart.
_V4 = ("ALTER TABLE conversations ADD COLUMN context_overhead INTEGER NOT NULL DEFAULT 0",)

# Versions as deltas: a small edit of a big artifact is a small write. A row is either a
# snapshot (base_idx NULL, the whole `content`) or a delta (`content` empty, `changes` the
# JSON list of [start, end, text] to apply to version base_idx, itself resolved the same
# way). chain_len and chain_size (deltas, and their JSON characters, since the last
# snapshot) let the insert decide when a snapshot is due (writes.py), which bounds what a
# read applies. Rows from before this migration are snapshots. SQLite cannot drop the
# NOT NULL of `content`, hence the empty string rather than a NULL.
_V5 = (
    "ALTER TABLE artifact_versions ADD COLUMN base_idx INTEGER",
    "ALTER TABLE artifact_versions ADD COLUMN changes TEXT",
    "ALTER TABLE artifact_versions ADD COLUMN chain_len INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE artifact_versions ADD COLUMN chain_size INTEGER NOT NULL DEFAULT 0",
    # A delta names an earlier, existing version of its artifact: chains always end.
    """CREATE TRIGGER artifact_versions_delta_base BEFORE INSERT ON artifact_versions
    WHEN (NEW.base_idx IS NULL) IS NOT (NEW.changes IS NULL)
        OR NEW.base_idx IS NOT NULL AND (NEW.base_idx >= NEW.idx OR NOT EXISTS (
            SELECT 1 FROM artifact_versions
            WHERE conversation_id = NEW.conversation_id AND idx = NEW.base_idx))
    BEGIN
        SELECT RAISE(ABORT, 'an artifact version delta needs changes and an earlier base version');
    END""",
)

# Conversation leases, for several processes sharing the file (see leases.py): who owns a
# conversation, until when, and the epoch that fences its writes. No reference to the
# conversation: a lease is claimed before the conversation is created.
_V6 = (
    """CREATE TABLE leases (
        conversation_id TEXT PRIMARY KEY,
        instance TEXT NOT NULL,
        epoch INTEGER NOT NULL CHECK (epoch > 0),
        expires_at REAL NOT NULL
    )""",
    "CREATE INDEX leases_by_instance ON leases (instance, expires_at)",
    # Partial: the sweep for dead owners reads only held leases, in expiry order.
    "CREATE INDEX leases_held_by_expiry ON leases (expires_at) WHERE instance <> ''",
)

# Memories are changed by compare-and-set (Store.swap_memories): each write stamps the row
# with a new random version, and a conditional write names the version it read. Rows from
# before have the empty version, which a writer that read them names like any other.
_V7 = ("ALTER TABLE memories ADD COLUMN version TEXT NOT NULL DEFAULT ''",)

# Quotas (chat_agent/quotas): a rate per user and name as GCRA's one number, the time at
# which the user's bucket will be empty again (`tat`); and what a user holds while it lasts (open
# sockets), renewed by the instance that holds it and gone once it expires, so an instance that
# died holds nothing for long. Turns by owner and end: the tokens a user spent today.
_V8 = (
    """CREATE TABLE quota_buckets (
        owner TEXT NOT NULL,
        name TEXT NOT NULL,
        tat REAL NOT NULL,
        PRIMARY KEY (owner, name)
    )""",
    """CREATE TABLE quota_holds (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        name TEXT NOT NULL,
        expires_at REAL NOT NULL
    )""",
    "CREATE INDEX quota_holds_by_owner ON quota_holds (owner, name, expires_at)",
    "CREATE INDEX turns_by_owner_end ON turns (owner, ended_at)",
)

# The store writer's marks of commits that no event identifies (see MarkCommit).
_V9 = (
    """CREATE TABLE commit_marks (
        writer TEXT NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (writer, n)
    )""",
)

# Turns that continue after a failure: how to build the turn again, and where it last did.
_V10 = (
    "ALTER TABLE turns ADD COLUMN spec TEXT",
    "ALTER TABLE turns ADD COLUMN continued_step INTEGER",
)

# Trees (conversations as trees: regenerate, edit and resend, branches). A visible message
# names its parent (`parent_id`) and keeps its role in a column, so the active path and the
# branch counts are read without parsing any message; the conversation names its active leaf.
# A model-facing item names the visible message it belongs to (`node`) and the items it
# replaces (`supersedes`, a JSON list: a summary, or a user message merged into what an
# aborted turn left), so each path's model-facing history is read from one append-only list
# (see tree.py). Existing conversations become single paths: each visible message's parent
# is the one before it, the leaf the last, and the model-facing history belongs to that leaf.
_V11 = (
    "ALTER TABLE history_items ADD COLUMN parent_id TEXT",
    "ALTER TABLE history_items ADD COLUMN role TEXT",
    "ALTER TABLE history_items ADD COLUMN node TEXT",
    "ALTER TABLE history_items ADD COLUMN supersedes TEXT",
    "ALTER TABLE conversations ADD COLUMN leaf_id TEXT",
    "UPDATE history_items SET role = json_extract(data, '$.role') WHERE history = 'visible'",
    """UPDATE history_items SET parent_id = (
        SELECT p.id FROM history_items p
        WHERE p.conversation_id = history_items.conversation_id AND p.history = 'visible'
            AND p.pos < history_items.pos
        ORDER BY p.pos DESC LIMIT 1)
    WHERE history = 'visible'""",
    """UPDATE conversations SET leaf_id = (
        SELECT h.id FROM history_items h
        WHERE h.conversation_id = conversations.id AND h.history = 'visible'
        ORDER BY h.pos DESC LIMIT 1)""",
    """UPDATE history_items SET node = (
        SELECT c.leaf_id FROM conversations c WHERE c.id = history_items.conversation_id)
    WHERE history = 'model'""",
    # ...and stands for every message of that path (named by its first item): a branch from
    # the path reads the messages' text instead, since this history is the whole path's.
    """UPDATE history_items SET supersedes = (
        SELECT json_group_array(v.id) FROM (
            SELECT id FROM history_items
            WHERE conversation_id = history_items.conversation_id AND history = 'visible' ORDER BY pos) v)
    WHERE history = 'model' AND pos = (
        SELECT MIN(m.pos) FROM history_items m
        WHERE m.conversation_id = history_items.conversation_id AND m.history = 'model')""",
)

# Search (PROTOCOL 1.2 "Find, rename, move conversations"): one document per visible message
# of every branch (its text parts) and one per title (message_id ''), kept by triggers so no
# way of writing a message or a title leaves the index behind; FTS5 indexes them (external
# content: the text is stored once, in search_docs). Existing messages and titles are indexed here.
_SEARCH = (
    """CREATE TABLE search_docs (
        id INTEGER PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        message_id TEXT NOT NULL,
        owner TEXT NOT NULL,
        body TEXT NOT NULL,
        UNIQUE (conversation_id, message_id)
    )""",
    "CREATE VIRTUAL TABLE search_fts USING fts5(body, content='search_docs', content_rowid='id',"
    " tokenize='unicode61 remove_diacritics 2')",
    """CREATE TRIGGER search_docs_insert AFTER INSERT ON search_docs BEGIN
        INSERT INTO search_fts (rowid, body) VALUES (NEW.id, NEW.body);
    END""",
    """CREATE TRIGGER search_docs_delete AFTER DELETE ON search_docs BEGIN
        INSERT INTO search_fts (search_fts, rowid, body) VALUES ('delete', OLD.id, OLD.body);
    END""",
    """CREATE TRIGGER search_docs_update AFTER UPDATE OF body ON search_docs BEGIN
        INSERT INTO search_fts (search_fts, rowid, body) VALUES ('delete', OLD.id, OLD.body);
        INSERT INTO search_fts (rowid, body) VALUES (NEW.id, NEW.body);
    END""",
    f"""CREATE TRIGGER history_items_search_insert AFTER INSERT ON history_items
    WHEN NEW.history = 'visible' BEGIN
        INSERT INTO search_docs (conversation_id, message_id, owner, body)
        SELECT NEW.conversation_id, NEW.id, c.owner, {"{text}"} FROM conversations c WHERE c.id = NEW.conversation_id
        ON CONFLICT (conversation_id, message_id) DO UPDATE SET body = excluded.body;
    END""",
    f"""CREATE TRIGGER history_items_search_update AFTER UPDATE OF data ON history_items
    WHEN NEW.history = 'visible' BEGIN
        UPDATE search_docs SET body = {"{text}"}
        WHERE conversation_id = NEW.conversation_id AND message_id = NEW.id;
    END""",
    """CREATE TRIGGER history_items_search_delete AFTER DELETE ON history_items
    WHEN OLD.history = 'visible' BEGIN
        DELETE FROM search_docs WHERE conversation_id = OLD.conversation_id AND message_id = OLD.id;
    END""",
    """CREATE TRIGGER conversations_search_title AFTER UPDATE OF title ON conversations BEGIN
        DELETE FROM search_docs WHERE conversation_id = NEW.id AND message_id = '' AND NEW.title IS NULL;
        INSERT INTO search_docs (conversation_id, message_id, owner, body)
        SELECT NEW.id, '', NEW.owner, NEW.title WHERE NEW.title IS NOT NULL
        ON CONFLICT (conversation_id, message_id) DO UPDATE SET body = excluded.body;
    END""",
    f"""INSERT INTO search_docs (conversation_id, message_id, owner, body)
    SELECT h.conversation_id, h.id, c.owner, {"{old_text}"} FROM history_items h
    JOIN conversations c ON c.id = h.conversation_id WHERE h.history = 'visible'""",
    """INSERT INTO search_docs (conversation_id, message_id, owner, body)
    SELECT id, '', owner, title FROM conversations WHERE title IS NOT NULL""",
)
# A visible message's text: its text parts (rows from before parts: `content`).
_TEXT = ("COALESCE((SELECT group_concat(json_extract(p.value, '$.text'), ' ') FROM json_each({row}.data, '$.parts') p"
         " WHERE json_extract(p.value, '$.type') = 'text'), json_extract({row}.data, '$.content'), '')")
_V11 = _V11 + tuple(statement.replace("{text}", _TEXT.format(row="NEW")).replace("{old_text}", _TEXT.format(row="h"))
                    for statement in _SEARCH)

# Knowledge bases (chat_agent/knowledge): a user's collections, their documents (an upload,
# indexed in the background: status and the reason it failed) and the documents' chunks. Chunks
# carry their owner and collection so that a search filters on them without a join; deleting a
# collection or a document cascades to its chunks, and the triggers take them out of the
# full-text index (FTS5, external content: the text is kept once). Vectors, when an embeddings
# model is configured, live in sqlite-vec `vec0` tables that the knowledge store creates itself
# (one per dimension, partitioned by collection), since creating one needs the extension loaded;
# where Python's sqlite3 cannot load it, in `knowledge_vectors` (float32 BLOBs, and their signs
# as bits for a first, coarse pass).
_V12 = (
    """CREATE TABLE knowledge_collections (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        name TEXT NOT NULL,
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX knowledge_collections_by_owner ON knowledge_collections (owner, created_at)",
    """CREATE TABLE knowledge_documents (
        id TEXT PRIMARY KEY,
        collection_id TEXT NOT NULL REFERENCES knowledge_collections (id) ON DELETE CASCADE,
        owner TEXT NOT NULL,
        file_id TEXT NOT NULL,
        filename TEXT NOT NULL,
        media_type TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('indexing', 'ready', 'failed')),
        error TEXT,
        runs INTEGER NOT NULL DEFAULT 0,
        pages INTEGER,
        chunks INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        indexed_at REAL
    )""",
    "CREATE INDEX knowledge_documents_by_collection ON knowledge_documents (collection_id, created_at)",
    """CREATE TABLE knowledge_chunks (
        id INTEGER PRIMARY KEY,
        document_id TEXT NOT NULL REFERENCES knowledge_documents (id) ON DELETE CASCADE,
        collection_id TEXT NOT NULL,
        owner TEXT NOT NULL,
        ord INTEGER NOT NULL,
        page INTEGER,
        heading TEXT NOT NULL DEFAULT '',
        text TEXT NOT NULL
    )""",
    "CREATE INDEX knowledge_chunks_by_document ON knowledge_chunks (document_id, ord)",
    "CREATE INDEX knowledge_chunks_by_collection ON knowledge_chunks (collection_id)",
    """CREATE VIRTUAL TABLE knowledge_fts USING fts5(
        heading, text, content = 'knowledge_chunks', content_rowid = 'id', tokenize = 'porter unicode61'
    )""",
    """CREATE TABLE knowledge_vectors (
        chunk_id INTEGER PRIMARY KEY REFERENCES knowledge_chunks (id) ON DELETE CASCADE,
        collection_id TEXT NOT NULL,
        embedding BLOB NOT NULL,
        bits BLOB NOT NULL
    )""",
    "CREATE INDEX knowledge_vectors_by_collection ON knowledge_vectors (collection_id)",
    """CREATE TRIGGER knowledge_chunks_indexed AFTER INSERT ON knowledge_chunks BEGIN
        INSERT INTO knowledge_fts (rowid, heading, text) VALUES (NEW.id, NEW.heading, NEW.text);
    END""",
    """CREATE TRIGGER knowledge_chunks_unindexed AFTER DELETE ON knowledge_chunks BEGIN
        INSERT INTO knowledge_fts (knowledge_fts, rowid, heading, text)
        VALUES ('delete', OLD.id, OLD.heading, OLD.text);
    END""",
)

# Reading a turn's model-facing history without reading the whole conversation (tree.py,
# tree_reads.py). A summary is marked (`base`): it stands for everything its path held up to
# its message, so a read starts at the newest summary of the path and reads only what was
# written since. Summaries stored before are those that replaced more than one item (one
# replacing a single item is indistinguishable from a user message merged into what an aborted
# turn left, and is read as before: the read goes past it). And the light columns of each
# history in position order, apart from the messages' JSON, in indexes: read from the table,
# every row's page is read, message and all (a 1,000-turn conversation: ~5 MB of pages for
# 2,000 rows of ~50 bytes).
_V13 = (
    "ALTER TABLE history_items ADD COLUMN base INTEGER NOT NULL DEFAULT 0",
    "UPDATE history_items SET base = 1"
    " WHERE history = 'model' AND supersedes IS NOT NULL AND json_array_length(supersedes) > 1",
    "CREATE INDEX history_items_tree ON history_items (conversation_id, history, pos, id, parent_id, role, chars)"
    " WHERE history = 'visible'",
    "CREATE INDEX history_items_model ON history_items"
    " (conversation_id, history, pos, id, tokens, chars, node, supersedes, base) WHERE history = 'model'",
    "CREATE INDEX history_items_by_node ON history_items"
    " (conversation_id, history, node, pos, id, tokens, chars, supersedes, base) WHERE history = 'model'",
    "CREATE INDEX history_items_bases ON history_items (conversation_id, history, base, node) WHERE history = 'model'",
)

# Search documents are indexed once per write batch, not by a trigger per row: FTS5 flushes
# what it has gathered to a new segment of the index at every savepoint, and a trigger's
# statement runs in one, so each message wrote its own segment and merged it in later
# (measured: 0.21 ms per 4 KB message through the triggers, 0.08 ms as one statement per
# batch of 20). A new or changed document waits in `search_pending` until the end of its
# batch (`sqlite.py`: `_apply`); one removed or changed before that was never in the index,
# so only an indexed one is taken out of it (FTS5 must be told the exact text it indexed).
_V14 = (
    "CREATE TABLE search_pending (doc INTEGER PRIMARY KEY)",
    "DROP TRIGGER search_docs_insert",
    "DROP TRIGGER search_docs_delete",
    "DROP TRIGGER search_docs_update",
    """CREATE TRIGGER search_docs_insert AFTER INSERT ON search_docs BEGIN
        INSERT INTO search_pending (doc) VALUES (NEW.id) ON CONFLICT DO NOTHING;
    END""",
    """CREATE TRIGGER search_docs_delete AFTER DELETE ON search_docs BEGIN
        INSERT INTO search_fts (search_fts, rowid, body) SELECT 'delete', OLD.id, OLD.body
        WHERE NOT EXISTS (SELECT 1 FROM search_pending WHERE doc = OLD.id);
        DELETE FROM search_pending WHERE doc = OLD.id;
    END""",
    """CREATE TRIGGER search_docs_update AFTER UPDATE OF body ON search_docs BEGIN
        INSERT INTO search_fts (search_fts, rowid, body) SELECT 'delete', OLD.id, OLD.body
        WHERE NOT EXISTS (SELECT 1 FROM search_pending WHERE doc = OLD.id);
        INSERT INTO search_pending (doc) VALUES (NEW.id) ON CONFLICT DO NOTHING;
    END""",
)
# What `_apply` runs before its COMMIT when documents wait.
INDEX_PENDING = (
    "INSERT INTO search_fts (rowid, body)"
    " SELECT d.id, d.body FROM search_pending p JOIN search_docs d ON d.id = p.doc",
    "DELETE FROM search_pending",
)

# PostgreSQL's version 15 makes a message's tsvector after its commit; FTS5 here indexes a
# batch's documents in one statement already (version 14), cheap enough to stay in the commit.
_V15: tuple[str, ...] = ()

# MIGRATIONS[n - 1] takes a database from version n - 1 to version n. Append, never edit.
# pg_schema.py holds PostgreSQL's, at the same version numbers.
MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11, _V12, _V13,
                                           _V14, _V15)
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


def migrate(db: sqlite3.Connection) -> int:
    """Apply the missing migrations in one transaction; returns the schema version."""
    # IMMEDIATE takes the write lock first, so two processes opening one new file
    # cannot both decide to create the tables.
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(_VERSION_TABLE)
        rows = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchall()
        current = int(rows[0][0])
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"database schema version {current} is newer than this build "
                f"supports ({SCHEMA_VERSION}); upgrade chat-agent"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version - 1]:
                db.execute(statement)
            db.execute(
                "INSERT INTO schema_version (version, applied_at)"
                " VALUES (?, CAST(strftime('%s', 'now') AS INTEGER))",
                (version,),
            )
        db.execute("COMMIT")
    except BaseException:
        db.rollback()
        raise
    return SCHEMA_VERSION
