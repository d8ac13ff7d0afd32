"""HTTP routes of the canvas: artifact versions and export, memories, custom quick actions."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from chat_agent.canvas.export import ExportError, export_artifact
from chat_agent.web.errors import error
from chat_agent.web.http import authed
from chat_agent.sessions.hub import Hub
from chat_agent.canvas.memory import validate_memories
from chat_agent.store import DeleteQuickAction, MemoriesRecord, PutQuickAction, QuickActionRecord
from chat_agent.ids import new_id
from chat_agent.text import all_encodable

MAX_BODY = 64 * 1024


class _BodyTooLarge(ValueError):
    pass


def _invalid(exc: ValueError) -> Response:
    if isinstance(exc, _BodyTooLarge):
        return error(413, "too_large", str(exc))
    return error(400, "invalid_request", str(exc))


async def _json_body(request: Request) -> dict[str, Any]:
    body = await request.body()
    if len(body) > MAX_BODY:
        raise _BodyTooLarge(f"The body is over {MAX_BODY} bytes.")
    try:
        data = json.loads(body)
    except RecursionError:
        raise ValueError("the body is nested too deeply") from None
    except ValueError:
        raise ValueError("the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise ValueError("the body must be a JSON object")
    if not all_encodable(data):
        raise ValueError("the body holds text that is not valid Unicode (a lone surrogate such as \\ud800)")
    return data


# ---- artifact ---------------------------------------------------------------------------

async def get_version(request: Request, hub: Hub, owner: str) -> Response:
    conversation_id = request.path_params["id"]
    try:
        index = int(request.path_params["index"])
    except ValueError:
        return error(404, "not_found", "No such version.")
    await hub.writer.flush()  # a version added a moment ago is already announced: make it readable
    version = await hub.store.get_artifact_version(owner, conversation_id, index)
    if version is None:
        return error(404, "not_found", "No such conversation, artifact or version.")
    return JSONResponse({"index": version.index, "type": version.type, "title": version.title,
                         "language": version.language, "content": version.content,
                         "createdAt": version.created_at, "source": version.source})


async def list_versions(request: Request, hub: Hub, owner: str) -> Response:
    """Every version without its content: who made it and when (the page's lines for the
    user's own edits, placed among the messages by time)."""
    conversation_id = request.path_params["id"]
    await hub.writer.flush()
    if await hub.store.get_conversation(owner, conversation_id) is None:
        return error(404, "not_found", "No such conversation.")
    versions = await hub.store.list_artifact_versions(owner, conversation_id)
    return JSONResponse({"versions": [{"index": v.index, "title": v.title, "createdAt": v.created_at,
                                       "source": v.source} for v in versions]})


async def export(request: Request, hub: Hub, owner: str) -> Response:
    fmt = request.query_params.get("format", "md")
    if fmt not in ("md", "docx", "code"):
        return error(400, "invalid_request", "format must be md, docx or code.")
    state = await hub.artifact(owner, request.path_params["id"])
    if state is None:
        return error(404, "not_found", "No such conversation or artifact.")
    current = state.current
    if fmt == "code" and current.type != "code":
        return error(400, "invalid_request", "format=code exports a code artifact as its source file; this "
                                             "artifact is text: ask for md or docx.")
    try:
        # a long document takes seconds to render: not on the event loop every client shares
        exported = await asyncio.to_thread(export_artifact, title=current.title, type=current.type,
                                           language=current.language, content=current.content, format=fmt)
    except ExportError as exc:
        return error(400, "invalid_request", str(exc))
    disposition = f"attachment; filename*=UTF-8''{quote(exported.filename)}"
    return Response(exported.body, media_type=exported.media_type, headers={"Content-Disposition": disposition})


# ---- memories -----------------------------------------------------------------------------

def _memories(record: MemoriesRecord) -> dict[str, Any]:
    return {"styleRules": record.style_rules, "content": record.content}


async def memories(request: Request, hub: Hub, owner: str) -> Response:
    if request.method == "GET":
        return JSONResponse(_memories(await hub.memories.load(owner)))
    if request.method == "DELETE":
        await hub.memories.delete(owner)
        return Response(status_code=204)
    try:
        body = await _json_body(request)
        style_rules, content = validate_memories(body.get("styleRules", []), body.get("content", []))
    except ValueError as exc:
        return _invalid(exc)
    return JSONResponse(_memories(await hub.memories.replace(owner, style_rules, content)))


# ---- custom quick actions -------------------------------------------------------------------

def _action(record: QuickActionRecord) -> dict[str, Any]:
    return {"id": record.id, "title": record.title, "prompt": record.prompt,
            "includeReflections": record.include_reflections, "includePrefix": record.include_prefix,
            "includeRecentHistory": record.include_recent_history}


def _action_fields(body: dict[str, Any], base: QuickActionRecord | None) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key, attr, limit in (("title", "title", 200), ("prompt", "prompt", 20_000)):
        value = body.get(key, getattr(base, attr) if base else None)
        if not isinstance(value, str) or not value.strip() or len(value) > limit:
            raise ValueError(f"`{key}` must be a non-empty string of at most {limit} characters")
        fields[attr] = value.strip()
    for key, attr in (("includeReflections", "include_reflections"), ("includePrefix", "include_prefix"),
                      ("includeRecentHistory", "include_recent_history")):
        value = body.get(key, getattr(base, attr) if base else True)
        if not isinstance(value, bool):
            raise ValueError(f"`{key}` must be true or false")
        fields[attr] = value
    return fields


async def quick_actions(request: Request, hub: Hub, owner: str) -> Response:
    if request.method == "GET":
        return JSONResponse({"quickActions": [_action(r) for r in await hub.store.list_quick_actions(owner)]})
    try:
        fields = _action_fields(await _json_body(request), None)
    except ValueError as exc:
        return _invalid(exc)
    now = time.time()
    record = QuickActionRecord(id=new_id("qa", hex_chars=16), owner=owner, created_at=now, updated_at=now, **fields)
    await hub.writer.wait_for(hub.writer.submit([PutQuickAction(record)]))
    return JSONResponse(_action(record), status_code=201)


async def quick_action(request: Request, hub: Hub, owner: str) -> Response:
    action_id = request.path_params["id"]
    existing = await hub.store.get_quick_action(owner, action_id)
    if existing is None:
        return error(404, "not_found", "No such quick action.")
    if request.method == "DELETE":
        await hub.writer.wait_for(hub.writer.submit([DeleteQuickAction(owner, action_id)]))
        return Response(status_code=204)
    try:
        fields = _action_fields(await _json_body(request), existing)
    except ValueError as exc:
        return _invalid(exc)
    record = QuickActionRecord(id=action_id, owner=owner, created_at=existing.created_at, updated_at=time.time(),
                               **fields)
    await hub.writer.wait_for(hub.writer.submit([PutQuickAction(record)]))
    return JSONResponse(_action(record))


routes = [
    Route("/api/conversations/{id}/artifact/versions", authed(list_versions), methods=["GET"]),
    Route("/api/conversations/{id}/artifact/versions/{index}", authed(get_version), methods=["GET"]),
    Route("/api/conversations/{id}/artifact/export", authed(export), methods=["GET"]),
    Route("/api/memories", authed(memories), methods=["GET", "PUT", "DELETE"]),
    Route("/api/quick-actions", authed(quick_actions), methods=["GET", "POST"]),
    Route("/api/quick-actions/{id}", authed(quick_action), methods=["PUT", "DELETE"]),
]
