"""`POST /api/uploads` and `GET /api/uploads/{id}` (PROTOCOL.md, HTTP).

An upload is held in memory whole (Files.save takes bytes), so the body is bounded twice:
a Content-Length above the limit is refused before a byte is read, and a body without one
(chunked) is counted as it arrives and cut off once past the limit, so it can never spool
more than about the limit to memory or disk.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from chat_agent.files.catalog import FileError
from chat_agent.quotas import Quotas
from chat_agent.web.errors import error
from chat_agent.web.http import authed
from chat_agent.sessions.hub import Hub

# Room for the multipart boundaries and part headers around the file itself.
ENVELOPE_BYTES = 64 * 1024
_STATUS = {"too_large": 413, "unsupported_type": 415, "not_found": 404}


class _TooLarge(Exception):
    pass


def _bounded(request: Request, limit: int) -> Request:
    """The same request, with a body that raises _TooLarge past `limit` bytes."""
    received = 0

    async def receive() -> Any:
        nonlocal received
        message = await request.receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise _TooLarge()
        return message

    return Request(request.scope, receive)


def _too_large(limit: int) -> Response:
    return error(413, "too_large", f"The file is larger than the limit of {limit:,} bytes.")


async def upload(request: Request, hub: Hub, owner: str) -> Response:
    limit = hub.settings.upload_max_bytes
    if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        return error(400, "invalid_upload", "Send the file as multipart/form-data, in a field named `file`.")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit + ENVELOPE_BYTES:
        return _too_large(limit)
    quotas: Quotas = request.app.state.quotas
    await quotas.upload(owner, None)  # QuotaExceeded: 429, before the body is read
    try:
        async with _bounded(request, limit + ENVELOPE_BYTES).form(max_files=2, max_fields=20) as form:
            parts = form.getlist("file")
            if len(parts) != 1 or not isinstance(parts[0], UploadFile):
                what = ("no field" if not parts else "more than one field" if len(parts) > 1
                        else "a field that is not a file")
                return error(400, "invalid_upload", f"The form has {what} named `file`; send exactly one file in it.")
            part = parts[0]
            if part.size is not None and part.size > limit:
                return _too_large(limit)
            data, filename = await part.read(), part.filename or "file"
    except _TooLarge:
        return _too_large(limit)
    except (HTTPException, MultiPartException) as exc:
        detail = exc.detail if isinstance(exc, HTTPException) else exc.message
        return error(400, "invalid_upload", f"The multipart body is malformed: {detail}")
    await quotas.upload(owner, len(data))  # the day's bytes: known once read
    try:
        stored = await hub.files.save(owner, data, filename, source="upload")
    except FileError as exc:
        return error(_STATUS.get(exc.code, 400), exc.code, exc.message)
    return JSONResponse({"uploadId": stored.id, "filename": stored.filename, "mediaType": stored.media_type,
                         "size": stored.size}, status_code=201)


async def download(request: Request, hub: Hub, owner: str) -> Response:
    try:
        file, data = await hub.files.read(owner, request.path_params["id"])
    except FileError:
        return error(404, "not_found", "No such upload.")
    # Images may show in the page; anything else downloads. nosniff and a sandboxing CSP
    # keep a browser from ever running what a user uploaded.
    disposition = "inline" if file.is_image else "attachment"
    fallback = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in file.filename)
    encoded = quote(file.filename, safe="")
    headers = {
        "Content-Disposition": f"{disposition}; filename=\"{fallback}\"; filename*=UTF-8''{encoded}",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "default-src 'none'; sandbox",
        "Cache-Control": "private, max-age=86400",  # a file never changes under its id
    }
    return Response(data, media_type=file.media_type, headers=headers)


routes = [
    Route("/api/uploads", authed(upload), methods=["POST"]),
    Route("/api/uploads/{id}", authed(download), methods=["GET"]),
]
