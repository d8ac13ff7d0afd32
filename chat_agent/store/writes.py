"""How each op becomes SQLite statements: pure functions, no I/O.

Ownership checks and history positions are computed inside the statements themselves
(`WHERE EXISTS (...)`, `MAX(pos) + 1`), so an op needs no read round trip before its
write, and a batch becomes a short list of `executemany` calls. Planning happens before
the transaction starts, so a value that cannot be encoded fails without touching the file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

from chat_agent.store.base import HistoryItem
from chat_agent.store.ops import (
    AppendEvents,
    AppendHistory,
    CreateConversation,
    DeleteConversation,
    FinishTurn,
    Op,
    PruneEvents,
    RecordClientMessageId,
    ReplaceHistory,
    SetTitle,
    StartTurn,
    UpsertHistoryItem,
)

Row = tuple[Any, ...]
Step = tuple[str, list[Row]]

# In every statement ?1 is the conversation id; _OWNED checks it against owner ?n.
_OWNED = "EXISTS (SELECT 1 FROM conversations WHERE id = ?1 AND owner = ?{n})"
_NEXT_POS = (
    "(SELECT COALESCE(MAX(pos), -1) + 1 FROM history_items"
    " WHERE conversation_id = ?1 AND history = ?2)"
)

CREATE_CONVERSATION = (
    "INSERT INTO conversations (id, owner, title, created_at, updated_at, last_seq)"
    " VALUES (?1, ?2, NULL, ?3, ?3, 0)"
)
DELETE_CONVERSATION = "DELETE FROM conversations WHERE id = ?1 AND owner = ?2"
SET_TITLE = "UPDATE conversations SET title = ?3 WHERE id = ?1 AND owner = ?2"
# A trigger raises the conversation's last_seq and updated_at (see schema.py).
INSERT_EVENT = (
    "INSERT INTO events (conversation_id, seq, type, turn_id, frame, stored_at)"
    " SELECT ?1, ?2, ?3, ?4, ?5, ?6 WHERE " + _OWNED.format(n=7)
)
PRUNE_EVENTS = (
    "DELETE FROM events WHERE conversation_id = ?1 AND seq < ?2 AND " + _OWNED.format(n=3)
)
APPEND_ITEM = (
    "INSERT INTO history_items (conversation_id, history, pos, id, data, tokens, chars)"
    f" SELECT ?1, ?2, {_NEXT_POS}, ?3, ?4, ?5, ?6 WHERE " + _OWNED.format(n=7)
)
# The conflict branch leaves `pos` alone, which is what keeps an upserted item in place.
UPSERT_ITEM = (
    APPEND_ITEM + " ON CONFLICT (conversation_id, history, id)"
    " DO UPDATE SET data = excluded.data, tokens = excluded.tokens, chars = excluded.chars"
)
CLEAR_HISTORY = (
    "DELETE FROM history_items WHERE conversation_id = ?1 AND history = ?2 AND "
    + _OWNED.format(n=3)
)
START_TURN = (
    "INSERT INTO turns (conversation_id, id, owner, message_id, status, started_at,"
    " first_seq, ended_at, stop_reason, usage)"
    " SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10 WHERE " + _OWNED.format(n=3)
)
FINISH_TURN = (
    "UPDATE turns SET status = ?4, stop_reason = ?5, usage = ?6, ended_at = ?7"
    " WHERE conversation_id = ?1 AND owner = ?2 AND id = ?3"
)
RECORD_CLIENT_ID = (
    "INSERT INTO client_message_ids (conversation_id, client_id) SELECT ?1, ?2"
    " WHERE " + _OWNED.format(n=3) + " ON CONFLICT DO NOTHING"
)


# What each statement touches, for `plan`. Events' trigger and SetTitle both update the
# conversation row, but different columns, so they commute.
_WHOLE = "*"  # creating or deleting a conversation orders against all of its rows
_TABLES = ("title", "events", "history", "turns", "client_ids")
_TABLE = {
    CREATE_CONVERSATION: _WHOLE,
    DELETE_CONVERSATION: _WHOLE,
    SET_TITLE: "title",
    INSERT_EVENT: "events",
    PRUNE_EVENTS: "events",
    APPEND_ITEM: "history",
    UPSERT_ITEM: "history",
    CLEAR_HISTORY: "history",
    START_TURN: "turns",
    FINISH_TURN: "turns",
    RECORD_CLIENT_ID: "client_ids",
}


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def plan(ops: Iterable[Op]) -> list[Step]:
    """The statements for `ops` as few `executemany` steps as their order allows.

    Statements commute unless they touch the same table of the same conversation, or one
    of them creates or deletes that conversation; only those pairs must keep their order.
    So a statement joins the earliest step running the same SQL that is not before any
    step it must follow. 50 conversations' AppendEvents and history upserts, interleaved
    in any way, become a handful of steps.
    """
    steps: list[Step] = []
    after: dict[tuple[str, str], int] = {}  # (conversation id, table) -> its latest step
    for op in ops:
        op_steps = statements(op)
        cid = op.turn.conversation_id if isinstance(op, StartTurn) else op.conversation_id
        for sql, rows in op_steps:
            if not rows:
                continue
            table = _TABLE[sql]
            keys = [(cid, t) for t in (_TABLES if table == _WHOLE else (table,))]
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
        case AppendEvents():
            return _append_events(op)
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
        case StartTurn():
            return [(START_TURN, [_turn_row(op)])]
        case FinishTurn():
            usage = None if op.usage is None else dumps(op.usage)
            row = (op.conversation_id, op.owner, op.turn_id, op.status, op.stop_reason)
            return [(FINISH_TURN, [(*row, usage, op.ended_at)])]
        case RecordClientMessageId():
            return [(RECORD_CLIENT_ID, [(op.conversation_id, op.client_id, op.owner)])]
    raise TypeError(f"not a store operation: {op!r}")


def _append_events(op: AppendEvents) -> list[Step]:
    cid, owner = op.conversation_id, op.owner
    at = time.time() if op.updated_at is None else op.updated_at
    rows = [(cid, e.seq, e.type, e.turn_id, e.frame, at, owner) for e in op.events]
    return [(INSERT_EVENT, rows)]


def _item_rows(cid: str, history: str, items: Sequence[HistoryItem], owner: str) -> list[Row]:
    return [(cid, history, i.id, dumps(i.data), i.tokens, i.chars, owner) for i in items]


def _turn_row(op: StartTurn) -> Row:
    t = op.turn
    usage = None if t.usage is None else dumps(t.usage)
    return (
        t.conversation_id, t.id, t.owner, t.message_id, t.status, t.started_at,
        t.first_seq, t.ended_at, t.stop_reason, usage,
    )
