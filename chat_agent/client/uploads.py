"""Files for a message: uploaded over HTTP (`POST /api/uploads`), then attached by id."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from .errors import ClientError


class UploadError(ClientError):
    """A file the server would not take (too large, unsupported type) or could not be sent."""


def http_base(ws_url: str) -> str:
    """ws://host:port/api/chat-agent → http://host:port (wss → https)."""
    parts = urlsplit(ws_url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, "", "", ""))


async def upload(ws_url: str, token: str | None, path: str | Path) -> dict[str, Any]:
    """Uploads a local file and returns the attachment that refers to it (an image or a
    document, by the type the server found in its bytes)."""
    path = Path(path).expanduser()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UploadError(f"cannot read {path}: {exc.strerror or exc}") from None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=http_base(ws_url), timeout=120) as http:
        try:
            response = await http.post("/api/uploads", files={"file": (path.name, data)}, headers=headers)
        except httpx.HTTPError as exc:
            raise UploadError(f"uploading {path.name} failed: {exc}") from None
    if response.status_code != 201:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = response.text[:200]
        raise UploadError(f"{path.name}: {message} (HTTP {response.status_code})")
    body = response.json()
    kind = "image" if str(body.get("mediaType", "")).startswith("image/") else "document"
    return {"type": kind, "uploadId": body["uploadId"]}
