"""What the server keeps, read over HTTP page by page (PROTOCOL 1.1): the user's conversations
(`GET /api/conversations`, following `nextCursor`) and a conversation's older messages
(`GET /api/conversations/{id}/messages?before=`), since `session` carries only the newest."""

from __future__ import annotations

from typing import Any

import httpx

from chat_agent.protocol import VisibleMessage

from .errors import ClientError
from .uploads import http_base

PAGE = 50


class HistoryError(ClientError):
    """The server would not answer (no such conversation or message, a bad token) or could not be reached."""


async def _get(http: httpx.AsyncClient, path: str, params: dict[str, Any]) -> dict[str, Any]:
    try:
        response = await http.get(path, params=params)
    except httpx.HTTPError as exc:
        raise HistoryError(f"GET {path} failed: {exc}") from None
    if response.status_code != 200:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = response.text[:200]
        raise HistoryError(f"{message} (HTTP {response.status_code})")
    return response.json()


def _client(ws_url: str, token: str | None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=http_base(ws_url), timeout=30, headers=headers)


async def list_conversations(ws_url: str, token: str | None, limit: int = PAGE) -> list[dict[str, Any]]:
    """Every conversation of the user, most recently active first. A conversation that
    became active while the pages were read comes once more with its newer state: the last
    one of each id is kept."""
    latest: dict[str, dict[str, Any]] = {}
    async with _client(ws_url, token) as http:
        params: dict[str, Any] = {"limit": limit}
        while True:
            body = await _get(http, "/api/conversations", params)
            for conversation in body["conversations"]:
                latest[conversation["id"]] = conversation
            if body.get("nextCursor") is None:
                break
            params = {"limit": limit, "cursor": body["nextCursor"]}
    return sorted(latest.values(), key=lambda c: (c["updatedAt"], c["id"]), reverse=True)


async def older_messages(ws_url: str, token: str | None, conversation_id: str, before: str,
                         limit: int = PAGE) -> tuple[list[VisibleMessage], str | None]:
    """The messages just before `before` (a `moreBefore`), oldest first, and the next `moreBefore`."""
    async with _client(ws_url, token) as http:
        body = await _get(http, f"/api/conversations/{conversation_id}/messages", {"before": before, "limit": limit})
    return [VisibleMessage.model_validate(m) for m in body["messages"]], body.get("moreBefore")


async def newest_messages(ws_url: str, token: str | None, conversation_id: str,
                          limit: int = PAGE) -> list[VisibleMessage]:
    """The newest messages of the active path, oldest first."""
    async with _client(ws_url, token) as http:
        body = await _get(http, f"/api/conversations/{conversation_id}/messages", {"limit": limit})
    return [VisibleMessage.model_validate(m) for m in body["messages"]]


async def conversation_tree(ws_url: str, token: str | None, conversation_id: str) -> dict[str, Any]:
    """Every message of every branch (`id`, `parentId`, `role`, `preview`…) and `leafId`
    (PROTOCOL 1.2 trees)."""
    async with _client(ws_url, token) as http:
        return await _get(http, f"/api/conversations/{conversation_id}/tree", {})
