"""PROTOCOL 1.2 trees over HTTP: `GET /api/conversations/{id}/tree`, every message of every
branch with its parent and a short preview, and the active leaf. A path's messages are read
with `GET /api/conversations/{id}/messages?leaf=ID` (history_routes.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from chat_agent.protocol import VisibleMessage
from chat_agent.sessions.hub import Hub
from chat_agent.web.errors import error
from chat_agent.web.http import authed

PREVIEW_CHARS = 120


def preview(message: VisibleMessage) -> str:
    text = " ".join(message.content.split())
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS - 1] + "…"


async def tree(request: Request, hub: Hub, owner: str) -> Response:
    conversation_id = request.path_params["id"]
    await hub.writer.flush()  # what was said a moment ago is part of the tree
    found = await hub.store.tree(owner, conversation_id)
    if found is None:
        return error(404, "not_found", "No such conversation.")
    items = await hub.store.load_history(owner, conversation_id, "visible")
    messages = []
    for item in items:
        message = VisibleMessage.model_validate(item.data)
        node = found.nodes.get(item.id)
        messages.append({"id": message.id, "parentId": node.parent_id if node else message.parent_id,
                         "role": message.role, "status": message.status, "preview": preview(message),
                         "createdAt": message.created_at})
    return JSONResponse({"messages": messages, "leafId": found.leaf})


routes = [Route("/api/conversations/{id}/tree", authed(tree), methods=["GET"])]
