"""Paged reading (PROTOCOL 1.1 "Long conversations open fast"): the conversation list with a
cursor, and a conversation's visible history page by page, older pages on demand.

The list is most recently active first (`updated_at` descending, ties by id), read as plain
keyset pages. A conversation that becomes active while a client pages jumps from behind the
cursor to the front, where plain keyset paging would miss it; so a listing is read in
windows of activity time. The first covers what was active up to the moment the listing
began (`updated_at <= until`); once it is exhausted, the next covers whatever became active
since the previous window began (`updated_at > since`, no upper bound), and so on. A window
after the first that fits in one page ends the listing: nothing can have escaped it, and a
conversation that was quiet since some window began is reached by that window or an
earlier one. So every conversation is reached: exactly once when it stays quiet (or changes
before the listing reaches it), and once more, with its newer state, when it changes after
it was listed; clients keep the last of each id. A listing stops after MAX_WINDOWS windows
whatever happens (only a user with more conversations streaming at once than fit in a page
could get there).

Time stamps: a window's bounds are taken after the writer flushed, and a change gets its
stamp when it goes to the store, so nothing stamped inside a window is committed after a
read of it. (With several instances on one database, clock skew between them loosens that:
the database should stamp `updated_at` at commit then.)
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import time
from dataclasses import dataclass, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from chat_agent.sessions.hub import Hub
from chat_agent.store import ConversationRecord
from chat_agent.web import conversation_routes
from chat_agent.web.errors import error
from chat_agent.web.http import authed, summary

MAX_LIMIT = 200
MAX_WINDOWS = 10
LIST_LIMIT = 50  # conversations per page unless `?limit=` says otherwise
MESSAGES_LIMIT = 50  # messages per page, as many as `session` carries


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a listing stands: the window it reads and the last conversation it gave."""

    window: int  # 0: what was active when the listing began; then what became active since
    since: float | None  # the window: since < updated_at <= until
    until: float | None
    began: float | None  # when the window's first page was read (None: not yet)
    after: tuple[float, str] | None = None  # (updated_at, id) of the last conversation given

    def encode(self) -> str:
        data = [self.window, self.since, self.until, self.began, list(self.after) if self.after else None]
        return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> "Cursor":
        """ValueError for anything this server did not hand out."""
        try:
            window, since, until, began, after = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
            if not isinstance(window, int) or isinstance(window, bool) or not 0 <= window <= MAX_WINDOWS:
                raise TypeError
            if after is not None:
                updated, conversation_id = after
                if not isinstance(conversation_id, str):
                    raise TypeError
                after = (_number(updated), conversation_id)
            return cls(window, _maybe(since), _maybe(until), _maybe(began), after)
        except (binascii.Error, UnicodeDecodeError, ValueError, TypeError, RecursionError):
            raise ValueError("`cursor` is not one this server gave (pass `nextCursor` as it is).") from None


def _maybe(value: Any) -> float | None:
    return None if value is None else _number(value)


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError
    return float(value)


def _limit(request: Request, default: int) -> int:
    text = request.query_params.get("limit")
    if text is None:
        return default
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise ValueError(f"`limit` must be a whole number from 1 to {MAX_LIMIT}.")
    return int(text)


async def list_conversations(request: Request, hub: Hub, owner: str) -> Response:
    try:
        limit = _limit(request, LIST_LIMIT)
        given = request.query_params.get("cursor")
        cursor = Cursor.decode(given) if given and "q" not in request.query_params else None
    except ValueError as exc:
        return error(400, "invalid_request", str(exc))
    if "q" in request.query_params:  # 1.2: a search, paged the same way (conversation_routes.py)
        return await conversation_routes.search(request, hub, owner, limit)
    await hub.writer.flush()  # every change stamped before now is in the store
    now = time.time()
    if cursor is None:
        cursor = Cursor(window=0, since=None, until=now, began=now)
    elif cursor.began is None:
        cursor = replace(cursor, began=now)
    records, following = await _page(hub, owner, cursor, limit)
    return JSONResponse({"conversations": [summary(r, hub.is_running(r.id)) for r in records],
                         "nextCursor": following.encode() if following else None})


async def _page(hub: Hub, owner: str, cursor: Cursor, limit: int) -> tuple[list[ConversationRecord], Cursor | None]:
    """One page of the cursor's window, and where the listing goes on (None: the end)."""
    store = hub.store
    records = await store.list_conversations(owner, limit + 1, after=cursor.after, since=cursor.since,
                                             until=cursor.until)
    if len(records) > limit:  # more in this window
        records = records[:limit]
        last = records[-1]
        return records, replace(cursor, after=(last.updated_at, last.id))
    if (cursor.window > 0 and cursor.after is None) or cursor.window == MAX_WINDOWS:
        return records, None  # read whole in one page: nothing became active unseen
    assert cursor.began is not None
    if not await store.list_conversations(owner, 1, since=cursor.began):
        return records, None
    return records, Cursor(window=cursor.window + 1, since=cursor.began, until=None, began=None)


async def messages(request: Request, hub: Hub, owner: str) -> Response:
    conversation_id = request.path_params["id"]
    try:
        limit = _limit(request, MESSAGES_LIMIT)
    except ValueError as exc:
        return error(400, "invalid_request", str(exc))
    before = request.query_params.get("before") or None
    leaf = request.query_params.get("leaf") or None  # 1.2 trees: any path, by its last message
    if await hub.store.get_conversation(owner, conversation_id) is None:
        return error(404, "not_found", "No such conversation.")
    page = await hub.history_page(owner, conversation_id, before, limit, leaf)
    if page is None:
        if leaf is not None:
            return error(404, "not_found", f"This conversation has no message {leaf!r} to end a path at, or "
                                           f"{before!r} is not on that path.")
        return error(404, "not_found", f"This conversation has no message {before!r} (`before` takes a message id, "
                                       "e.g. `moreBefore`).")
    found, more_before = page
    return JSONResponse({"messages": [m.model_dump(mode="json") for m in found], "moreBefore": more_before})


routes = [
    Route("/api/conversations", authed(list_conversations), methods=["GET"]),
    Route("/api/conversations/{id}/messages", authed(messages), methods=["GET"]),
]
