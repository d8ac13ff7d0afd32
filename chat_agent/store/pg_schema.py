"""The PostgreSQL schema as numbered migrations, at the same version numbers as SQLite's
(schema.py, which explains the tables), and the code that brings a database up to date.

The same tables, keys, checks and triggers as SQLite's, so that the statements of writes.py
mean the same on both: times are `DOUBLE PRECISION` unix seconds, integers `BIGINT`, JSON
is kept as the exact text written (events are replayed verbatim). A trigger that refuses a
row raises `check_violation`, which the store reports as a `ConstraintError` like SQLite's
`RAISE(ABORT)`. Functions and tables are created in the first schema of the connection's
`search_path`, so one database can hold several stores side by side (the tests' isolation).
"""

from __future__ import annotations

from psycopg import AsyncConnection

from chat_agent.store.base import StoreError

_REFUSE = (
    # A trigger's refusal: its first argument is the message.
    """CREATE FUNCTION refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION '%', TG_ARGV[0] USING ERRCODE = 'check_violation';
    END $$"""
)

_V1 = (
    """CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        title TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        last_seq BIGINT NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX conversations_by_owner ON conversations (owner, updated_at DESC, id DESC)",
    """CREATE TABLE history_items (
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        history TEXT NOT NULL CHECK (history IN ('visible', 'model')),
        pos BIGINT NOT NULL,
        id TEXT NOT NULL,
        data TEXT NOT NULL,
        tokens BIGINT NOT NULL,
        chars BIGINT NOT NULL,
        PRIMARY KEY (conversation_id, history, pos),
        UNIQUE (conversation_id, history, id)
    )""",
    """CREATE TABLE events (
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        seq BIGINT NOT NULL CHECK (seq > 0),
        type TEXT NOT NULL,
        turn_id TEXT,
        frame TEXT NOT NULL,
        stored_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (conversation_id, seq)
    )""",
    # Once per statement, with every row it inserted: an insert of a whole batch's events
    # (see postgres.py) updates each conversation once, not once per event.
    """CREATE FUNCTION events_raise_conversation() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE conversations c
        SET last_seq = GREATEST(c.last_seq, n.seq), updated_at = GREATEST(c.updated_at, n.stored_at)
        FROM (SELECT conversation_id, MAX(seq) AS seq, MAX(stored_at) AS stored_at
              FROM inserted GROUP BY conversation_id) n
        WHERE c.id = n.conversation_id;
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER events_raise_conversation AFTER INSERT ON events
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION events_raise_conversation()""",
    """CREATE TABLE turns (
        id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        owner TEXT NOT NULL,
        message_id TEXT NOT NULL,
        status TEXT NOT NULL
            CHECK (status IN ('running', 'complete', 'aborted', 'interrupted', 'error')),
        started_at DOUBLE PRECISION NOT NULL,
        first_seq BIGINT NOT NULL,
        ended_at DOUBLE PRECISION,
        stop_reason TEXT,
        usage TEXT
    )""",
    "CREATE INDEX turns_by_conversation ON turns (conversation_id)",
    "CREATE INDEX turns_running ON turns (status) WHERE status = 'running'",
    """CREATE TABLE client_message_ids (
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        client_id TEXT NOT NULL,
        PRIMARY KEY (conversation_id, client_id)
    )""",
)

_V2 = (
    _REFUSE,
    """CREATE TABLE artifacts (
        conversation_id TEXT PRIMARY KEY REFERENCES conversations (id) ON DELETE CASCADE,
        id TEXT NOT NULL,
        current_index BIGINT NOT NULL,
        version_count BIGINT NOT NULL,
        CHECK (current_index BETWEEN 1 AND version_count
               OR current_index = 0 AND version_count = 0)
    )""",
    """CREATE TABLE artifact_versions (
        conversation_id TEXT NOT NULL
            REFERENCES artifacts (conversation_id) ON DELETE CASCADE,
        idx BIGINT NOT NULL,
        type TEXT NOT NULL CHECK (type IN ('text', 'code')),
        title TEXT NOT NULL,
        language TEXT,
        content TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        source TEXT NOT NULL CHECK (source IN ('model', 'user')),
        PRIMARY KEY (conversation_id, idx)
    )""",
    """CREATE FUNCTION artifact_versions_in_order() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.idx IS DISTINCT FROM
            (SELECT version_count + 1 FROM artifacts WHERE conversation_id = NEW.conversation_id) THEN
            RAISE EXCEPTION 'artifact version index must be version_count + 1'
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END $$""",
    """CREATE TRIGGER artifact_versions_in_order BEFORE INSERT ON artifact_versions
    FOR EACH ROW EXECUTE FUNCTION artifact_versions_in_order()""",
    """CREATE FUNCTION artifact_versions_raise_artifact() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE artifacts SET version_count = NEW.idx, current_index = NEW.idx
        WHERE conversation_id = NEW.conversation_id;
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER artifact_versions_raise_artifact AFTER INSERT ON artifact_versions
    FOR EACH ROW EXECUTE FUNCTION artifact_versions_raise_artifact()""",
    """CREATE TRIGGER artifacts_keep_id BEFORE UPDATE OF id ON artifacts
    FOR EACH ROW WHEN (NEW.id IS DISTINCT FROM OLD.id)
    EXECUTE FUNCTION refuse_change('a conversation has one artifact: its id cannot change')""",
    """CREATE TABLE memories (
        owner TEXT PRIMARY KEY,
        style_rules TEXT NOT NULL,
        content TEXT NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE quick_actions (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        title TEXT NOT NULL,
        prompt TEXT NOT NULL,
        include_reflections BOOLEAN NOT NULL,
        include_prefix BOOLEAN NOT NULL,
        include_recent_history BOOLEAN NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX quick_actions_by_owner ON quick_actions (owner, created_at)",
    """CREATE TRIGGER quick_actions_keep_owner BEFORE UPDATE OF owner ON quick_actions
    FOR EACH ROW WHEN (NEW.owner IS DISTINCT FROM OLD.owner)
    EXECUTE FUNCTION refuse_change('quick action id belongs to another owner')""",
)

# `n` numbers the links in the order they were made (SQLite's rowid does it there).
_V3 = (
    """CREATE TABLE files (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        filename TEXT NOT NULL,
        media_type TEXT NOT NULL,
        size BIGINT NOT NULL CHECK (size >= 0),
        source TEXT NOT NULL CHECK (source IN ('upload', 'attachment', 'generated', 'code')),
        width BIGINT,
        height BIGINT,
        blob_key TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        CHECK ((width IS NULL) = (height IS NULL))
    )""",
    """CREATE TABLE conversation_files (
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        file_id TEXT NOT NULL REFERENCES files (id),
        added_at DOUBLE PRECISION NOT NULL,
        n BIGINT GENERATED ALWAYS AS IDENTITY,
        PRIMARY KEY (conversation_id, file_id)
    )""",
)

_V4 = ("ALTER TABLE conversations ADD COLUMN context_overhead BIGINT NOT NULL DEFAULT 0",)

_V5 = (
    "ALTER TABLE artifact_versions ADD COLUMN base_idx BIGINT",
    "ALTER TABLE artifact_versions ADD COLUMN changes TEXT",
    "ALTER TABLE artifact_versions ADD COLUMN chain_len BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE artifact_versions ADD COLUMN chain_size BIGINT NOT NULL DEFAULT 0",
    """CREATE FUNCTION artifact_versions_delta_base() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF (NEW.base_idx IS NULL) IS DISTINCT FROM (NEW.changes IS NULL)
            OR NEW.base_idx IS NOT NULL AND (NEW.base_idx >= NEW.idx OR NOT EXISTS (
                SELECT 1 FROM artifact_versions
                WHERE conversation_id = NEW.conversation_id AND idx = NEW.base_idx)) THEN
            RAISE EXCEPTION 'an artifact version delta needs changes and an earlier base version'
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END $$""",
    """CREATE TRIGGER artifact_versions_delta_base BEFORE INSERT ON artifact_versions
    FOR EACH ROW EXECUTE FUNCTION artifact_versions_delta_base()""",
)

# Leases (leases.py), and the fence `apply` checks first in its transaction, so that the
# check costs no round trip of its own: it raises FENCED with the ids that failed as its
# detail. Share-locking the rows (in id order, as renewals lock them) makes a claim that
# would take one over wait until this transaction ends; the check then reads the rows as
# committed now (a new snapshot per statement).
FENCED = "CAF01"
_V6 = (
    """CREATE TABLE leases (
        conversation_id TEXT PRIMARY KEY,
        instance TEXT NOT NULL,
        epoch BIGINT NOT NULL CHECK (epoch > 0),
        expires_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX leases_by_instance ON leases (instance, expires_at)",
    "CREATE INDEX leases_held_by_expiry ON leases (expires_at) WHERE instance <> ''",
    f"""CREATE FUNCTION check_fences(ids TEXT[], instances TEXT[], epochs BIGINT[])
    RETURNS void LANGUAGE plpgsql AS $$
    DECLARE
        fenced TEXT[];
    BEGIN
        PERFORM 1 FROM leases WHERE conversation_id = ANY (ids) ORDER BY conversation_id FOR SHARE;
        SELECT array_agg(f.id ORDER BY f.id) INTO fenced
        FROM unnest(ids, instances, epochs) AS f (id, instance, epoch)
        WHERE NOT EXISTS (SELECT 1 FROM leases l
                          WHERE l.conversation_id = f.id AND l.instance = f.instance AND l.epoch = f.epoch);
        IF fenced IS NOT NULL THEN
            RAISE EXCEPTION 'the lease changed hands' USING ERRCODE = '{FENCED}', DETAIL = array_to_json(fenced)::text;
        END IF;
    END $$""",
)
CHECK_FENCES = "SELECT check_fences($1, $2, $3)"

# The memories' version stamp, for compare-and-set (see schema.py).
_V7 = ("ALTER TABLE memories ADD COLUMN version TEXT NOT NULL DEFAULT ''",)

# Quotas (chat_agent/quotas): a rate per user and name as GCRA's one number, the time at
# which the user's bucket will be empty again (`tat`); and what a user holds while it lasts (open
# sockets), renewed by the instance that holds it and gone once it expires, so an instance that
# died holds nothing for long. Turns by owner and end: the tokens a user spent today.
_V8 = (
    """CREATE TABLE quota_buckets (
        owner TEXT NOT NULL,
        name TEXT NOT NULL,
        tat DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (owner, name)
    )""",
    """CREATE TABLE quota_holds (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        name TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX quota_holds_by_owner ON quota_holds (owner, name, expires_at)",
    "CREATE INDEX turns_by_owner_end ON turns (owner, ended_at)",
)

# The store writer's marks of commits that no event identifies (see MarkCommit).
_V9 = (
    """CREATE TABLE commit_marks (
        writer TEXT NOT NULL,
        n BIGINT NOT NULL,
        PRIMARY KEY (writer, n)
    )""",
)

# Turns that continue after a failure: how to build the turn again, and where it last did.
_V10 = (
    "ALTER TABLE turns ADD COLUMN spec TEXT",
    "ALTER TABLE turns ADD COLUMN continued_step INTEGER",
)

# Trees: the same as schema.py's migration 10 (see there).
_V11 = (
    "ALTER TABLE history_items ADD COLUMN parent_id TEXT",
    "ALTER TABLE history_items ADD COLUMN role TEXT",
    "ALTER TABLE history_items ADD COLUMN node TEXT",
    "ALTER TABLE history_items ADD COLUMN supersedes TEXT",
    "ALTER TABLE conversations ADD COLUMN leaf_id TEXT",
    """UPDATE history_items h SET role = CAST(h.data AS jsonb) ->> 'role', parent_id = p.prev
    FROM (SELECT conversation_id, pos, LAG(id) OVER (PARTITION BY conversation_id ORDER BY pos) AS prev
          FROM history_items WHERE history = 'visible') p
    WHERE h.history = 'visible' AND h.conversation_id = p.conversation_id AND h.pos = p.pos""",
    """UPDATE conversations c SET leaf_id = (
        SELECT h.id FROM history_items h
        WHERE h.conversation_id = c.id AND h.history = 'visible'
        ORDER BY h.pos DESC LIMIT 1)""",
    """UPDATE history_items h SET node = c.leaf_id FROM conversations c
    WHERE c.id = h.conversation_id AND h.history = 'model'""",
    """UPDATE history_items h SET supersedes = (
        SELECT CAST(json_agg(v.id ORDER BY v.pos) AS TEXT) FROM history_items v
        WHERE v.conversation_id = h.conversation_id AND v.history = 'visible')
    WHERE h.history = 'model' AND h.pos = (
        SELECT MIN(m.pos) FROM history_items m WHERE m.conversation_id = h.conversation_id AND m.history = 'model')""",
)

# Search: as schema.py's, with a tsvector (the 'simple' configuration: no language's stemming
# or stop words, like SQLite's unicode61) and a GIN index; triggers keep it.
_TEXT = ("COALESCE((SELECT string_agg(p ->> 'text', ' ') FROM jsonb_array_elements(CASE WHEN"
         " jsonb_typeof(CAST({data} AS jsonb) -> 'parts') = 'array' THEN CAST({data} AS jsonb) -> 'parts'"
         " ELSE CAST('[]' AS jsonb) END) p WHERE p ->> 'type' = 'text'), CAST({data} AS jsonb) ->> 'content', '')")
_V11 = _V11 + (
    """CREATE TABLE search_docs (
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        message_id TEXT NOT NULL,
        owner TEXT NOT NULL,
        body TEXT NOT NULL,
        tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED,
        PRIMARY KEY (conversation_id, message_id)
    )""",
    "CREATE INDEX search_docs_tsv ON search_docs USING GIN (tsv)",
    "CREATE INDEX search_docs_by_owner ON search_docs (owner)",
    f"""CREATE FUNCTION history_items_search() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'DELETE' THEN
            DELETE FROM search_docs WHERE conversation_id = OLD.conversation_id AND message_id = OLD.id;
            RETURN OLD;
        END IF;
        INSERT INTO search_docs (conversation_id, message_id, owner, body)
        SELECT NEW.conversation_id, NEW.id, c.owner, {_TEXT.format(data="NEW.data")}
        FROM conversations c WHERE c.id = NEW.conversation_id
        ON CONFLICT (conversation_id, message_id) DO UPDATE SET body = excluded.body;
        RETURN NEW;
    END $$""",
    """CREATE TRIGGER history_items_search_write AFTER INSERT OR UPDATE OF data ON history_items
    FOR EACH ROW WHEN (NEW.history = 'visible') EXECUTE FUNCTION history_items_search()""",
    """CREATE TRIGGER history_items_search_delete AFTER DELETE ON history_items
    FOR EACH ROW WHEN (OLD.history = 'visible') EXECUTE FUNCTION history_items_search()""",
    """CREATE FUNCTION conversations_search_title() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.title IS NULL THEN
            DELETE FROM search_docs WHERE conversation_id = NEW.id AND message_id = '';
        ELSE
            INSERT INTO search_docs (conversation_id, message_id, owner, body) VALUES (NEW.id, '', NEW.owner, NEW.title)
            ON CONFLICT (conversation_id, message_id) DO UPDATE SET body = excluded.body;
        END IF;
        RETURN NEW;
    END $$""",
    """CREATE TRIGGER conversations_search_title AFTER UPDATE OF title ON conversations
    FOR EACH ROW EXECUTE FUNCTION conversations_search_title()""",
    f"""INSERT INTO search_docs (conversation_id, message_id, owner, body)
    SELECT h.conversation_id, h.id, c.owner, {_TEXT.format(data="h.data")} FROM history_items h
    JOIN conversations c ON c.id = h.conversation_id WHERE h.history = 'visible'""",
    """INSERT INTO search_docs (conversation_id, message_id, owner, body)
    SELECT id, '', owner, title FROM conversations WHERE title IS NOT NULL""",
)

# Knowledge bases (schema.py explains them). Full text: a generated tsvector under a GIN index.
# Vectors without pgvector (not assumed installed): a plain REAL[] column, unit length, and its
# signs as a bit string, scored by the database: the Hamming distance of the bits (bit_count,
# native) picks candidates, their dot product over unnest ranks them.
_V12 = (
    """CREATE TABLE knowledge_collections (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        name TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL
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
        pages BIGINT,
        chunks BIGINT NOT NULL DEFAULT 0,
        created_at DOUBLE PRECISION NOT NULL,
        indexed_at DOUBLE PRECISION
    )""",
    "CREATE INDEX knowledge_documents_by_collection ON knowledge_documents (collection_id, created_at)",
    """CREATE TABLE knowledge_chunks (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        document_id TEXT NOT NULL REFERENCES knowledge_documents (id) ON DELETE CASCADE,
        collection_id TEXT NOT NULL,
        owner TEXT NOT NULL,
        ord BIGINT NOT NULL,
        page BIGINT,
        heading TEXT NOT NULL DEFAULT '',
        text TEXT NOT NULL,
        embedding REAL[],
        embedding_bits BIT VARYING,
        tsv TSVECTOR GENERATED ALWAYS AS (
            setweight(to_tsvector('english', heading), 'B') || to_tsvector('english', text)) STORED
    )""",
    "CREATE INDEX knowledge_chunks_by_document ON knowledge_chunks (document_id, ord)",
    "CREATE INDEX knowledge_chunks_by_collection ON knowledge_chunks (collection_id)",
    "CREATE INDEX knowledge_chunks_tsv ON knowledge_chunks USING GIN (tsv)",
)

# Summaries marked, and the indexes a turn's model-facing history is read by (schema.py
# explains them). The model-facing items' light columns are not in an index here: `supersedes`
# (a summary's list of every item it replaces) can outgrow a B-tree entry, and TOAST keeps the
# messages' JSON out of the rows.
_V13 = (
    "ALTER TABLE history_items ADD COLUMN base BOOLEAN NOT NULL DEFAULT FALSE",
    "UPDATE history_items SET base = TRUE"
    " WHERE history = 'model' AND supersedes IS NOT NULL AND json_array_length(CAST(supersedes AS json)) > 1",
    "CREATE INDEX history_items_tree ON history_items (conversation_id, history, pos)"
    " INCLUDE (id, parent_id, role, chars) WHERE history = 'visible'",
    "CREATE INDEX history_items_by_node ON history_items (conversation_id, history, node, pos) WHERE history = 'model'",
    "CREATE INDEX history_items_bases ON history_items (conversation_id, history, base, node) WHERE history = 'model'",
)

# SQLite's version 14 indexes search documents once per batch instead of per row; a GIN index
# here has no such cost (PostgreSQL gathers its entries in the pending list either way).
_V14: tuple[str, ...] = ()

# A message's tsvector is made off the commit that writes it: computed in that commit, it was
# most of the commit's time (a 9 KB reply: 1.7 ms of a 2 ms insert, 0.6 ms of it to_tsvector,
# the rest its GIN entries), and every frame committed after waited for it. A new or changed
# document waits with `tsv` NULL until the store's indexer (postgres.py, `SearchIndexer`)
# takes it, a few at a time, within a second or so; a search meanwhile reads such documents'
# text itself, so nothing written is ever missing from its results.
_V15: tuple[str, ...] = (
    "ALTER TABLE search_docs ALTER COLUMN tsv DROP EXPRESSION",  # the indexed keep their tsv
    "CREATE INDEX search_docs_unindexed ON search_docs (owner) WHERE tsv IS NULL",
    """CREATE FUNCTION search_docs_unindex() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.tsv := NULL;
        RETURN NEW;
    END $$""",
    """CREATE TRIGGER search_docs_unindex BEFORE UPDATE OF body ON search_docs
    FOR EACH ROW WHEN (OLD.body IS DISTINCT FROM NEW.body) EXECUTE FUNCTION search_docs_unindex()""",
    # The large texts every turn writes (its frames, its messages twice, their search text) are
    # compressed with lz4 rather than pglz: a 9 KB text 36 us instead of 102, a quarter larger.
    # Values stored before stay as they are; a server built without lz4 keeps pglz.
    """DO $$ BEGIN
        ALTER TABLE events ALTER COLUMN frame SET COMPRESSION lz4;
        ALTER TABLE history_items ALTER COLUMN data SET COMPRESSION lz4;
        ALTER TABLE search_docs ALTER COLUMN body SET COMPRESSION lz4;
        ALTER TABLE artifact_versions ALTER COLUMN content SET COMPRESSION lz4;
    EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN NULL;
    END $$""",
)

# MIGRATIONS[n - 1] takes a database from version n - 1 to version n. Append, never edit;
# every version here is the same schema as schema.py's of that number.
MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11, _V12, _V13,
                                           _V14, _V15)
SCHEMA_VERSION = len(MIGRATIONS)

_VERSION_TABLE = """CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER PRIMARY KEY,
    applied_at BIGINT NOT NULL
)"""
# Held until the migrating transaction ends; keyed by the schema, so stores in other
# schemas of the database do not wait on each other.
_LOCK = "SELECT pg_advisory_xact_lock(hashtext('chat-agent schema'), hashtext(COALESCE(current_schema(), '')))"


async def migrate(conn: AsyncConnection, upto: int = SCHEMA_VERSION) -> int:
    """Applies the missing migrations up to version `upto`, in one transaction, under an
    advisory lock: of several instances starting together one migrates, the others wait and
    then find nothing to do. Returns the version the database was at before."""
    async with conn.transaction():
        await conn.execute(_LOCK)
        await conn.execute(_VERSION_TABLE)
        cursor = await conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version")
        row = await cursor.fetchone()
        current = int(row[0]) if row else 0
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"database schema version {current} is newer than this build "
                f"supports ({SCHEMA_VERSION}); upgrade chat-agent"
            )
        for version in range(current + 1, upto + 1):
            for statement in MIGRATIONS[version - 1]:
                await conn.execute(statement)
            await conn.execute(  # no parameters: any cursor class runs it
                "INSERT INTO schema_version (version, applied_at)"
                f" VALUES ({int(version)}, CAST(EXTRACT(EPOCH FROM now()) AS BIGINT))"
            )
    return current
