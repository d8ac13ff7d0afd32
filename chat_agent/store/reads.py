"""Reads both backends run as they are (with dialect.py's placeholders for PostgreSQL).

Every read that a conversation's rows answer joins or checks `conversations.owner`, so
another owner's data is never seen. What only one backend can say (SQLite's `json_each`
and `rowid`, PostgreSQL's `jsonb_each`) stays in that backend's module.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import jiter

from chat_agent import edits
from chat_agent.store.base import StoreError
from chat_agent.store.records import ArtifactVersionRecord, HistoryItem, MemoriesRecord, QuickActionRecord, TurnRecord

# A conversation whose messages were written without naming a leaf (by a writer that knows
# nothing of trees) has its newest message as its leaf.
CONVERSATION = (
    "SELECT id, owner, title, created_at, updated_at, last_seq, context_overhead,"
    " COALESCE(leaf_id, (SELECT h.id FROM history_items h WHERE h.conversation_id = conversations.id"
    " AND h.history = 'visible' ORDER BY h.pos DESC LIMIT 1)) FROM conversations"
)
CONVERSATION_TAKEN = "SELECT 1 FROM conversations WHERE id = ?"
# A total order (ids are unique), so a page can start exactly after the last row of the one
# before; the index on (owner, updated_at DESC) serves it, ties on updated_at sorted by id.
NEWEST_FIRST = "updated_at DESC, id DESC"
TURN = (
    "SELECT id, conversation_id, owner, message_id, status, started_at, first_seq,"
    " ended_at, stop_reason, usage, spec, continued_step FROM turns"
)
ITEM_COLUMNS = "h.id, h.data, h.tokens, h.chars, h.parent_id, h.node, h.supersedes"
HISTORY = (
    f"SELECT {ITEM_COLUMNS} FROM history_items h"
    " JOIN conversations c ON c.id = h.conversation_id"
    " WHERE c.id = ? AND c.owner = ? AND h.history = ? ORDER BY h.pos"
)
# Positions never change once given (an upsert keeps its item's), so paging by position is stable.
POSITION = (
    "SELECT h.pos FROM history_items h JOIN conversations c ON c.id = h.conversation_id"
    " WHERE c.id = ? AND c.owner = ? AND h.history = ? AND h.id = ?"
)
PAGE = (
    f"SELECT {ITEM_COLUMNS} FROM history_items h"
    " JOIN conversations c ON c.id = h.conversation_id"
    " WHERE c.id = ? AND c.owner = ? AND h.history = ? AND h.pos < ? ORDER BY h.pos DESC LIMIT ?"
)
SIZE = (
    "SELECT COUNT(*), COALESCE(SUM(h.tokens), 0), COALESCE(SUM(h.chars), 0) FROM history_items h"
    " JOIN conversations c ON c.id = h.conversation_id"
    " WHERE c.id = ? AND c.owner = ? AND h.history = ?"
)
RUNNING_TURNS = f"{TURN} WHERE status = 'running' AND conversation_id = ? ORDER BY started_at, id"
COMMIT_MARK = "SELECT 1 FROM commit_marks WHERE writer = ? AND n = ?"
EVENTS = (
    "SELECT e.conversation_id, e.seq, e.type, e.turn_id, e.frame FROM events e"
    " JOIN conversations c ON c.id = e.conversation_id"
    " WHERE c.id = ? AND c.owner = ? AND e.seq > ? ORDER BY e.seq LIMIT ?"
)
CLIENT_ID = (
    "SELECT 1 FROM client_message_ids m JOIN conversations c ON c.id = m.conversation_id"
    " WHERE c.id = ? AND c.owner = ? AND m.client_id = ?"
)
# A version row, then how its content is kept (see schema.py, migration 5).
VERSION_COLUMNS = "v.idx, v.type, v.title, v.language, v.content, v.created_at, v.source, v.base_idx, v.changes"
# Joined on current_index: only the current version's content is read.
ARTIFACT = (
    f"SELECT a.id, a.conversation_id, a.current_index, a.version_count, {VERSION_COLUMNS}"
    " FROM artifacts a JOIN conversations c ON c.id = a.conversation_id"
    " JOIN artifact_versions v ON v.conversation_id = a.conversation_id"
    " AND v.idx = a.current_index WHERE c.id = ? AND c.owner = ?"
)
ARTIFACT_VERSION = (
    f"SELECT {VERSION_COLUMNS} FROM artifact_versions v"
    " JOIN conversations c ON c.id = v.conversation_id"
    " WHERE c.id = ? AND c.owner = ? AND v.idx = ?"
)
# Who wrote each version and when, without its content: the page's lines for the user's edits.
ARTIFACT_VERSIONS = (
    "SELECT v.idx, v.title, v.created_at, v.source FROM artifact_versions v"
    " JOIN conversations c ON c.id = v.conversation_id"
    " WHERE c.id = ? AND c.owner = ? ORDER BY v.idx"
)
# A delta's base, the base's base, … down to the snapshot, nearest first: one statement,
# each step a primary-key lookup, at most MAX_CHAIN + 1 rows (writes.py).
CHAIN = (
    "WITH RECURSIVE chain (depth, base_idx, content, changes) AS ("
    " SELECT 0, base_idx, content, changes FROM artifact_versions WHERE conversation_id = ?1 AND idx = ?2"
    " UNION ALL SELECT c.depth + 1, v.base_idx, v.content, v.changes FROM chain c"
    " JOIN artifact_versions v ON v.conversation_id = ?1 AND v.idx = c.base_idx)"
    " SELECT base_idx, content, changes FROM chain ORDER BY depth"
)
MEMORIES = "SELECT style_rules, content, updated_at, version FROM memories WHERE owner = ?"
QUICK_ACTION = (
    "SELECT id, owner, title, prompt, include_reflections, include_prefix,"
    " include_recent_history, created_at, updated_at FROM quick_actions WHERE owner = ?"
)
FILE_COLUMNS = (
    "f.id, f.owner, f.filename, f.media_type, f.size, f.source, f.width, f.height, f.blob_key,"
    " f.created_at"
)
FILE = f"SELECT {FILE_COLUMNS} FROM files f WHERE f.id = ? AND f.owner = ?"


def version(conversation_id: str, row: Sequence[Any], chain: Sequence[Sequence[Any]] | None) -> ArtifactVersionRecord:
    """A version row (VERSION_COLUMNS) with its content resolved: a delta is applied to its
    base's content, which `chain` (CHAIN's rows for the base) gives."""
    *fields, base_idx, changes = row
    record = ArtifactVersionRecord(*fields)
    if base_idx is not None:
        record.content = edits.apply(_content(conversation_id, base_idx, chain or []), json.loads(changes))
    return record


def _content(conversation_id: str, index: int, chain: Sequence[Sequence[Any]]) -> str:
    if not chain or chain[-1][0] is not None:
        raise StoreError(f"artifact version {index} of {conversation_id} has no snapshot behind it")
    content = chain[-1][1]
    for _, _, changes in reversed(chain[:-1]):
        content = edits.apply(content, json.loads(changes))
    return content


def item(row: Sequence[Any]) -> HistoryItem:
    id, data, tokens, chars, parent_id, node, supersedes = row
    return stored_item(id, data, tokens, chars, parent_id, node, tuple(json.loads(supersedes)) if supersedes else ())


def stored_item(id: str, data: str, tokens: int, chars: int, parent_id: str | None, node: str | None,
                supersedes: tuple[str, ...], base: bool = False) -> HistoryItem:
    raw = data.encode()
    return HistoryItem(id, parse(raw), tokens, chars, parent_id, node, supersedes, base, raw)


def parse(raw: bytes) -> Any:
    """JSON we stored. jiter reads a long message ~3× faster than json (a history of 300k
    characters: 0.5 ms instead of 1.7); what it refuses and json reads (an escaped lone
    surrogate) goes to json."""
    try:
        return jiter.from_json(raw, cache_mode="keys")
    except ValueError:
        return json.loads(raw)


def turn(row: Sequence[Any]) -> TurnRecord:
    *head, usage, spec, continued_step = row
    return TurnRecord(*head, usage=None if usage is None else json.loads(usage),
                      spec=None if spec is None else json.loads(spec), continued_step=continued_step)


def memories(row: Sequence[Any]) -> MemoriesRecord:
    style_rules, content, updated_at, version = row
    return MemoriesRecord(json.loads(style_rules), json.loads(content), updated_at, version)


def quick_action(row: Sequence[Any]) -> QuickActionRecord:
    id, owner, title, prompt, reflections, prefix, history, created_at, updated_at = row
    return QuickActionRecord(
        id, owner, title, prompt, bool(reflections), bool(prefix), bool(history),
        created_at, updated_at,
    )
