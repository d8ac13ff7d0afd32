"""How each op becomes SQL statements: pure functions, no I/O, for both backends.

Ownership checks and history positions are computed inside the statements themselves
(`WHERE EXISTS (...)`, `MAX(pos) + 1`), so an op needs no read round trip before its
write, and a batch becomes a short list of `executemany` calls. Planning happens before
the transaction starts, so a value that cannot be encoded fails without touching the file.

The statements are written once, in SQL both SQLite and PostgreSQL run, with SQLite's
placeholders (dialect.py gives PostgreSQL's); the schemas (schema.py, pg_schema.py) give
both the same tables, constraints and triggers. `plan` groups by the text of these
statements, so each backend only has to execute them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from chat_agent.store.ops import (
    MarkCommit,
    AddArtifactVersion,
    AddFile,
    AppendEvents,
    AppendHistory,
    AttachFile,
    CreateConversation,
    DeleteConversation,
    DeleteMemories,
    DeleteQuickAction,
    ContinueTurn,
    FinishTurn,
    Op,
    PruneEvents,
    PutQuickAction,
    RecordClientMessageId,
    ReplaceHistory,
    DeleteHistoryItems,
    SetLeaf,
    SelectArtifactVersion,
    SetMemories,
    SetContextOverhead,
    SetTitle,
    StartTurn,
    UpsertHistoryItem,
    op_scope,
)
from chat_agent import clock
from chat_agent.ids import new_id
from chat_agent.store.records import HistoryItem, MemoriesRecord

Row = tuple[Any, ...]
Step = tuple[str, list[Row]]

# In every statement ?1 is the conversation id; _OWNED checks it against owner ?n.
_OWNED = "EXISTS (SELECT 1 FROM conversations WHERE id = ?1 AND owner = ?{n})"
# `history = CAST(?2 AS TEXT)`, never `history = ?2`: SQLite weighs a bare parameter compared
# with a partial index's column (history_items' indexes are `WHERE history = 'model'` or
# 'visible') by its bound value, and such a statement is prepared again, its triggers compiled
# again, every time the value is bound: 0.1 ms of an item's 0.125 ms insert. An expression is
# not weighed; the primary key serves these statements either way.
_HISTORY = "history = CAST(?2 AS TEXT)"
_NEXT_POS = (
    "(SELECT COALESCE(MAX(pos), -1) + 1 FROM history_items"
    f" WHERE conversation_id = ?1 AND {_HISTORY})"
)

CREATE_CONVERSATION = (
    "INSERT INTO conversations (id, owner, title, created_at, updated_at, last_seq)"
    " VALUES (?1, ?2, NULL, ?3, ?3, 0)"
)
DELETE_CONVERSATION = "DELETE FROM conversations WHERE id = ?1 AND owner = ?2"
SET_TITLE = "UPDATE conversations SET title = ?3 WHERE id = ?1 AND owner = ?2"
SET_OVERHEAD = "UPDATE conversations SET context_overhead = ?3 WHERE id = ?1 AND owner = ?2"
# A trigger raises the conversation's last_seq and updated_at (see schema.py).
INSERT_EVENT = (
    "INSERT INTO events (conversation_id, seq, type, turn_id, frame, stored_at)"
    " SELECT ?1, ?2, ?3, ?4, ?5, ?6 WHERE " + _OWNED.format(n=7)
)
PRUNE_EVENTS = (
    "DELETE FROM events WHERE conversation_id = ?1 AND seq < ?2 AND " + _OWNED.format(n=3)
)
APPEND_ITEM = (
    "INSERT INTO history_items (conversation_id, history, pos, id, data, tokens, chars, parent_id, role, node,"
    f" supersedes, base) SELECT ?1, ?2, {_NEXT_POS}, ?3, ?4, ?5, ?6, ?8, ?9, ?10, ?11, ?12 WHERE "
    + _OWNED.format(n=7)
)
# The conflict branch leaves `pos` alone, which is what keeps an upserted item in place.
UPSERT_ITEM = (
    APPEND_ITEM + " ON CONFLICT (conversation_id, history, id)"
    " DO UPDATE SET data = excluded.data, tokens = excluded.tokens, chars = excluded.chars"
)
CLEAR_HISTORY = (
    f"DELETE FROM history_items WHERE conversation_id = ?1 AND {_HISTORY} AND "
    + _OWNED.format(n=3)
)
DELETE_ITEM = (
    f"DELETE FROM history_items WHERE conversation_id = ?1 AND {_HISTORY} AND id = ?3 AND "
    + _OWNED.format(n=4)
)
SET_LEAF = "UPDATE conversations SET leaf_id = ?3 WHERE id = ?1 AND owner = ?2"
START_TURN = (
    "INSERT INTO turns (conversation_id, id, owner, message_id, status, started_at,"
    " first_seq, ended_at, stop_reason, usage, spec)"
    " SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11 WHERE " + _OWNED.format(n=3)
)
CONTINUE_TURN = (
    "UPDATE turns SET continued_step = ?4"
    " WHERE conversation_id = ?1 AND owner = ?2 AND id = ?3 AND status = 'running'"
)
FINISH_TURN = (
    "UPDATE turns SET status = ?4, stop_reason = ?5, usage = ?6, ended_at = ?7"
    " WHERE conversation_id = ?1 AND owner = ?2 AND id = ?3"
)
RECORD_CLIENT_ID = (
    "INSERT INTO client_message_ids (conversation_id, client_id) SELECT ?1, ?2"
    " WHERE " + _OWNED.format(n=3) + " ON CONFLICT DO NOTHING"
)

# The artifact row first (created empty, or its id checked), then the version, whose
# triggers check the index and move the counters (see schema.py). Comparing ids in the
# conflict branch leaves the row unwritten unless they differ, and then a trigger fails.
ENSURE_ARTIFACT = (
    "INSERT INTO artifacts (conversation_id, id, current_index, version_count)"
    " SELECT ?1, ?2, 0, 0 WHERE " + _OWNED.format(n=3)
    + " ON CONFLICT (conversation_id) DO UPDATE SET id = excluded.id"
    " WHERE excluded.id IS DISTINCT FROM artifacts.id"
)
# Snapshot cadence: a version is stored as its delta while the chain behind it (deltas
# since the last snapshot) stays under MAX_CHAIN deltas and its deltas' JSON under
# DELTA_SHARE of the new content; otherwise whole. So a read applies at most MAX_CHAIN
# deltas totalling at most half the content, and a run of small edits on a 1 MB artifact
# stores one megabyte per MAX_CHAIN edits (~32 KB an edit), not one per edit. The choice is
# made inside the statement, from the base row, so planning stays free of reads; a delta
# whose base is missing is stored whole.
MAX_CHAIN = 32
DELTA_SHARE = 0.5
INSERT_VERSION = (
    "INSERT INTO artifact_versions (conversation_id, idx, type, title, language, content,"
    " created_at, source, base_idx, changes, chain_len, chain_size)"
    " SELECT ?1, ?2, ?3, ?4, ?5, CASE WHEN d.keep THEN '' ELSE ?6 END, ?7, ?8,"
    " CASE WHEN d.keep THEN ?10 END, CASE WHEN d.keep THEN ?11 END,"
    " CASE WHEN d.keep THEN d.len ELSE 0 END, CASE WHEN d.keep THEN d.size ELSE 0 END"
    f" FROM (SELECT COALESCE(b.chain_len < {MAX_CHAIN} AND b.chain_size + LENGTH(CAST(?11 AS TEXT)) <= ?12,"
    " FALSE) AS keep, b.chain_len + 1 AS len, b.chain_size + LENGTH(CAST(?11 AS TEXT)) AS size"
    " FROM (SELECT 1) AS one LEFT JOIN artifact_versions b ON b.conversation_id = ?1 AND b.idx = ?10) d"
    " WHERE " + _OWNED.format(n=9)
)
# A CHECK on artifacts refuses an index outside 1..version_count.
SELECT_VERSION = (
    "UPDATE artifacts SET current_index = ?2 WHERE conversation_id = ?1 AND "
    + _OWNED.format(n=3)
)
SET_MEMORIES = (
    "INSERT INTO memories (owner, style_rules, content, updated_at, version) VALUES (?1, ?2, ?3, ?4, ?5)"
    " ON CONFLICT (owner) DO UPDATE SET style_rules = excluded.style_rules,"
    " content = excluded.content, updated_at = excluded.updated_at, version = excluded.version"
)
DELETE_MEMORIES = "DELETE FROM memories WHERE owner = ?1"
# Compare-and-set (`Store.swap_memories`, no op: its caller needs to know whether it took):
# the row is written only over the version the caller read, or created only where there is
# none; RETURNING says whether it was. A version is random, never a counter, so a row that
# was deleted and made again cannot pass for the one that was read.
INSERT_MEMORIES_IF_NONE = (
    "INSERT INTO memories (owner, style_rules, content, updated_at, version) VALUES (?1, ?2, ?3, ?4, ?5)"
    " ON CONFLICT (owner) DO NOTHING RETURNING version"
)
UPDATE_MEMORIES_IF_VERSION = (
    "UPDATE memories SET style_rules = ?2, content = ?3, updated_at = ?4, version = ?5"
    " WHERE owner = ?1 AND version = ?6 RETURNING version"
)
# Setting owner lets a trigger refuse another owner's id (see schema.py); created_at is
# left alone so an edited quick action keeps its place in the list.
PUT_QUICK_ACTION = (
    "INSERT INTO quick_actions (id, owner, title, prompt, include_reflections,"
    " include_prefix, include_recent_history, created_at, updated_at)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
    " ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, title = excluded.title,"
    " prompt = excluded.prompt, include_reflections = excluded.include_reflections,"
    " include_prefix = excluded.include_prefix,"
    " include_recent_history = excluded.include_recent_history,"
    " updated_at = excluded.updated_at"
)
DELETE_QUICK_ACTION = "DELETE FROM quick_actions WHERE id = ?1 AND owner = ?2"
# A writer's newest mark replaces its older ones: one row per writer.
CLEAR_MARKS = "DELETE FROM commit_marks WHERE writer = ?1 AND n < ?2"
MARK_COMMIT = "INSERT INTO commit_marks (writer, n) VALUES (?1, ?2)"
INSERT_FILE = (
    "INSERT INTO files (id, owner, filename, media_type, size, source, width, height, blob_key,"
    " created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
)
# Both the conversation and the file must be the owner's; a second attach changes nothing.
ATTACH_FILE = (
    "INSERT INTO conversation_files (conversation_id, file_id, added_at) SELECT ?1, ?2, ?3"
    " WHERE " + _OWNED.format(n=4) + " AND EXISTS (SELECT 1 FROM files WHERE id = ?2 AND owner = ?4)"
    " ON CONFLICT DO NOTHING"
)


# What each statement touches, for `plan`. Events' trigger and SetTitle both update the
# conversation row, but different columns, so they commute.
_WHOLE = "*"  # creating or deleting a conversation orders against all of its rows
_TABLES = ("title", "overhead", "leaf", "events", "history", "turns", "client_ids", "artifact", "files")
_TABLE = {
    CREATE_CONVERSATION: _WHOLE,
    DELETE_CONVERSATION: _WHOLE,
    SET_TITLE: "title",
    SET_OVERHEAD: "overhead",
    INSERT_EVENT: "events",
    PRUNE_EVENTS: "events",
    APPEND_ITEM: "history",
    UPSERT_ITEM: "history",
    CLEAR_HISTORY: "history",
    DELETE_ITEM: "history",
    SET_LEAF: "leaf",
    START_TURN: "turns",
    FINISH_TURN: "turns",
    CONTINUE_TURN: "turns",
    RECORD_CLIENT_ID: "client_ids",
    ENSURE_ARTIFACT: "artifact",
    INSERT_VERSION: "artifact",
    SELECT_VERSION: "artifact",
    # Scoped by owner or by quick action id, never by a conversation (see `op_scope`).
    SET_MEMORIES: "memories",
    DELETE_MEMORIES: "memories",
    PUT_QUICK_ACTION: "quick_action",
    DELETE_QUICK_ACTION: "quick_action",
    # One table name for both, so an AddFile's link always follows its file (see AddFile).
    INSERT_FILE: "files",
    ATTACH_FILE: "files",
    CLEAR_MARKS: "marks",
    MARK_COMMIT: "marks",
}


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def new_version() -> str:
    """A stored row's version stamp (memories): random, so that it is never used twice."""
    return new_id(hex_chars=16)


def swap_memories(owner: str, record: MemoriesRecord, expected: str | None, version: str) -> tuple[str, Row]:
    """The statement of `Store.swap_memories` and its parameters: it returns a row when
    `record` was written (as `version`), none when the stored version was not `expected`."""
    row = (owner, dumps(list(record.style_rules)), dumps(list(record.content)), record.updated_at, version)
    if expected is None:
        return INSERT_MEMORIES_IF_NONE, row
    return UPDATE_MEMORIES_IF_VERSION, (*row, expected)


def plan(ops: Iterable[Op]) -> list[Step]:
    """The statements for `ops` as few `executemany` steps as their order allows.

    Statements commute unless they touch the same table of the same scope (a
    conversation, an owner's memories, a quick action), or one of them creates or deletes
    that conversation; only those pairs must keep their order.
    So a statement joins the earliest step running the same SQL that is not before any
    step it must follow. 50 conversations' AppendEvents and history upserts, interleaved
    in any way, become a handful of steps.
    """
    steps: list[Step] = []
    after: dict[tuple[str, str], int] = {}  # (scope, table) -> its latest step
    for op in ops:
        op_steps = statements(op)
        scope = op_scope(op)
        for sql, rows in op_steps:
            if not rows:
                continue
            table = _TABLE[sql]
            keys = [(scope, t) for t in (_TABLES if table == _WHOLE else (table,))]
            start = max(after.get(key, 0) for key in keys)
            index = next((i for i in range(start, len(steps)) if steps[i][0] == sql), None)
            if index is None:
                index = len(steps)
                steps.append((sql, []))
            steps[index][1].extend(rows)
            after.update((key, index) for key in keys)
    return steps


def statements(op: Op) -> list[Step]:
    match op:
        case CreateConversation():
            return [(CREATE_CONVERSATION, [(op.conversation_id, op.owner, op.created_at)])]
        case DeleteConversation():
            return [(DELETE_CONVERSATION, [(op.conversation_id, op.owner)])]
        case SetTitle():
            return [(SET_TITLE, [(op.conversation_id, op.owner, op.title)])]
        case SetContextOverhead():
            return [(SET_OVERHEAD, [(op.conversation_id, op.owner, op.tokens)])]
        case AppendEvents():
            return _append_events(op)
        case MarkCommit():
            return [(CLEAR_MARKS, [(op.writer, op.n)]), (MARK_COMMIT, [(op.writer, op.n)])]
        case PruneEvents():
            return [(PRUNE_EVENTS, [(op.conversation_id, op.before_seq, op.owner)])]
        case AppendHistory():
            rows = _item_rows(op.conversation_id, op.history, op.items, op.owner)
            return [(APPEND_ITEM, rows)]
        case UpsertHistoryItem():
            rows = _item_rows(op.conversation_id, op.history, (op.item,), op.owner)
            return [(UPSERT_ITEM, rows)]
        case ReplaceHistory():
            rows = _item_rows(op.conversation_id, op.history, op.items, op.owner)
            clear = (op.conversation_id, op.history, op.owner)
            return [(CLEAR_HISTORY, [clear]), (APPEND_ITEM, rows)]
        case DeleteHistoryItems():
            return [(DELETE_ITEM, [(op.conversation_id, op.history, i, op.owner) for i in op.ids])]
        case SetLeaf():
            return [(SET_LEAF, [(op.conversation_id, op.owner, op.leaf_id)])]
        case StartTurn():
            return [(START_TURN, [_turn_row(op)])]
        case ContinueTurn():
            return [(CONTINUE_TURN, [(op.conversation_id, op.owner, op.turn_id, op.step)])]
        case FinishTurn():
            usage = None if op.usage is None else dumps(op.usage)
            row = (op.conversation_id, op.owner, op.turn_id, op.status, op.stop_reason)
            return [(FINISH_TURN, [(*row, usage, op.ended_at)])]
        case RecordClientMessageId():
            return [(RECORD_CLIENT_ID, [(op.conversation_id, op.client_id, op.owner)])]
        case AddArtifactVersion():
            return _add_version(op)
        case SelectArtifactVersion():
            return [(SELECT_VERSION, [(op.conversation_id, op.index, op.owner)])]
        case SetMemories():
            m = op.memories
            row = (op.owner, dumps(list(m.style_rules)), dumps(list(m.content)), m.updated_at, m.version or new_version())
            return [(SET_MEMORIES, [row])]
        case DeleteMemories():
            return [(DELETE_MEMORIES, [(op.owner,)])]
        case PutQuickAction():
            return [(PUT_QUICK_ACTION, [_quick_action_row(op)])]
        case DeleteQuickAction():
            return [(DELETE_QUICK_ACTION, [(op.id, op.owner)])]
        case AddFile():
            return _add_file(op)
        case AttachFile():
            return [(ATTACH_FILE, [(op.conversation_id, op.file_id, op.added_at, op.owner)])]
    raise TypeError(f"not a store operation: {op!r}")


def _append_events(op: AppendEvents) -> list[Step]:
    cid, owner = op.conversation_id, op.owner
    at = clock.now() if op.updated_at is None else op.updated_at
    rows = [(cid, e.seq, e.type, e.turn_id, e.frame, at, owner) for e in op.events]
    return [(INSERT_EVENT, rows)]


def _item_rows(cid: str, history: str, items: Sequence[HistoryItem], owner: str) -> list[Row]:
    return [(cid, history, i.id, dumps(i.data), i.tokens, i.chars, owner, i.parent_id,
             i.data.get("role") if history == "visible" else None, i.node,
             dumps(list(i.supersedes)) if i.supersedes else None, i.base) for i in items]


def _turn_row(op: StartTurn) -> Row:
    t = op.turn
    usage = None if t.usage is None else dumps(t.usage)
    return (
        t.conversation_id, t.id, t.owner, t.message_id, t.status, t.started_at,
        t.first_seq, t.ended_at, t.stop_reason, usage, None if t.spec is None else dumps(t.spec),
    )


def _add_version(op: AddArtifactVersion) -> list[Step]:
    cid, owner, v, delta = op.conversation_id, op.owner, op.version, op.delta
    base, changes = (None, None) if delta is None else (delta.base_index, dumps([list(c) for c in delta.changes]))
    row = (cid, v.index, v.type, v.title, v.language, v.content, v.created_at, v.source, owner,
           base, changes, int(len(v.content) * DELTA_SHARE))
    return [(ENSURE_ARTIFACT, [(cid, op.artifact_id, owner)]), (INSERT_VERSION, [row])]


def _quick_action_row(op: PutQuickAction) -> Row:
    q = op.record
    return (
        q.id, q.owner, q.title, q.prompt, bool(q.include_reflections), bool(q.include_prefix),
        bool(q.include_recent_history), q.created_at, q.updated_at,
    )


def _add_file(op: AddFile) -> list[Step]:
    f = op.record
    row = (f.id, f.owner, f.filename, f.media_type, f.size, f.source, f.width, f.height, f.blob_key,
           f.created_at)
    steps: list[Step] = [(INSERT_FILE, [row])]
    if op.conversation_id is not None:
        steps.append((ATTACH_FILE, [(op.conversation_id, f.id, f.created_at, f.owner)]))
    return steps
