"""PROTOCOL 1.2 "Find, rename, move conversations" over HTTP: search (`GET /api/conversations?q=`,
answered from `history_routes.list_conversations`), rename, export and import."""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from chat_agent.protocol import RenameIn
from chat_agent.rejection import FrameRejected
from chat_agent.sessions.hub import Hub
from chat_agent.sessions.transfer import ImportError_, export_conversation, import_conversation
from chat_agent.text import all_encodable
from chat_agent.web.errors import error
from chat_agent.web.http import authed, summary

MAX_QUERY = 500  # characters of a search
MAX_TERMS = 16
MAX_IMPORT = 32 * 1024 * 1024  # bytes of an imported document
WORD = re.compile(r"\w+")


def _offset(text: str | None) -> int:
    if not text:
        return 0
    try:
        data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        if isinstance(data, dict) and isinstance(data.get("offset"), int) and 0 <= data["offset"] <= 10**6:
            return data["offset"]
    except (binascii.Error, UnicodeDecodeError, ValueError, RecursionError):
        pass
    raise ValueError("`cursor` is not one this server gave (pass `nextCursor` as it is).")


def _cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode().rstrip("=")


async def search(request: Request, hub: Hub, owner: str, limit: int) -> Response:
    """The caller's conversations whose title or messages (every branch) hold every word of
    `q`, best match first, paged like the list; each with its best `match`."""
    query = request.query_params.get("q", "")
    terms = WORD.findall(query)[:MAX_TERMS]
    if len(query) > MAX_QUERY or not terms:
        return error(400, "invalid_request", f"`q` needs at least one word (at most {MAX_QUERY} characters).")
    try:
        offset = _offset(request.query_params.get("cursor"))
    except ValueError as exc:
        return error(400, "invalid_request", str(exc))
    await hub.writer.flush()  # what was said a moment ago is found
    hits = await hub.store.search_conversations(owner, terms, limit + 1, offset)
    conversations = [{**summary(hit.record, hub.is_running(hit.record.id)),
                      "match": {"messageId": hit.message_id, "snippet": hit.snippet}} for hit in hits[:limit]]
    return JSONResponse({"conversations": conversations,
                         "nextCursor": _cursor(offset + limit) if len(hits) > limit else None})


async def _body(request: Request, limit: int) -> Any:
    body = await request.body()
    if len(body) > limit:
        raise OverflowError(f"The body is over {limit} bytes.")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise ValueError("the body is not valid JSON") from None
    if not isinstance(data, dict) or not all_encodable(data):
        raise ValueError("the body must be a JSON object of valid Unicode text")
    return data


async def rename(request: Request, hub: Hub, owner: str) -> Response:
    conversation_id = request.path_params["id"]
    try:
        body = await _body(request, 64 * 1024)
    except OverflowError as exc:
        return error(413, "too_large", str(exc))
    except ValueError as exc:
        return error(400, "invalid_request", str(exc))
    title = body.get("title")
    if not isinstance(title, str) or not title.strip() or len(title) > 200:
        return error(400, "invalid_request", "`title` must be a non-empty string of at most 200 characters.")
    live = await hub.registry.open(owner, conversation_id)
    if live is None:
        return error(404, "not_found", "No such conversation.")
    try:
        # Run by the instance that owns the conversation (it publishes the `title` frame).
        await hub.command(live, RenameIn(type="rename", title=title.strip()), echo=True)
    except FrameRejected as exc:
        status = 404 if exc.code == "not_found" else 500
        return error(status, "not_found" if status == 404 else "internal", exc.message)
    finally:
        hub.registry.release(live)
    await hub.writer.flush()
    record = await hub.store.get_conversation(owner, conversation_id)
    if record is None:  # deleted meanwhile
        return error(404, "not_found", "No such conversation.")
    return JSONResponse(summary(record, hub.is_running(conversation_id)))


async def export(request: Request, hub: Hub, owner: str) -> Response:
    await hub.writer.flush()  # the export holds what was said up to now
    document = await export_conversation(hub.store, owner, request.path_params["id"])
    if document is None:
        return error(404, "not_found", "No such conversation.")
    return JSONResponse(document)


async def import_(request: Request, hub: Hub, owner: str) -> Response:
    try:
        body = await _body(request, MAX_IMPORT)
        conversation_id = await import_conversation(hub.store, hub.writer, owner, body)
    except OverflowError as exc:
        return error(413, "too_large", str(exc))
    except (ValueError, ImportError_) as exc:
        return error(400, "invalid_request", str(exc))
    record = await hub.store.get_conversation(owner, conversation_id)
    assert record is not None
    return JSONResponse(summary(record, False), status_code=201)


routes = [
    Route("/api/conversations/import", authed(import_), methods=["POST"]),
    Route("/api/conversations/{id}", authed(rename), methods=["PATCH"]),
    Route("/api/conversations/{id}/export", authed(export), methods=["GET"]),
]
