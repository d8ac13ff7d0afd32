"""HTTP routes of knowledge bases (PROTOCOL 1.2 "Knowledge bases and citations"): the caller's
collections, and their documents, added from uploads and indexed in the background. Another
user's ids answer 404, as ids that do not exist do."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from chat_agent.knowledge import Knowledge, KnowledgeError
from chat_agent.sessions.hub import Hub
from chat_agent.web.canvas_routes import _invalid, _json_body
from chat_agent.web.errors import CODES, error
from chat_agent.web.http import authed


def _knowledge(request: Request) -> Knowledge:
    knowledge: Knowledge | None = request.app.state.knowledge
    if knowledge is None:
        raise KnowledgeError(503, "Knowledge bases need a database file or PostgreSQL; this server keeps its "
                                  "store in memory.")
    return knowledge


def _refused(exc: KnowledgeError) -> Response:
    return error(exc.status, CODES.get(exc.status, "invalid_request"), exc.message)


async def collections(request: Request, hub: Hub, owner: str) -> Response:
    try:
        knowledge = _knowledge(request)
        if request.method == "GET":
            return JSONResponse({"collections": [c.to_json() for c in await knowledge.collections(owner)]})
        try:
            body = await _json_body(request)
        except ValueError as exc:
            return _invalid(exc)
        collection = await knowledge.create_collection(owner, body.get("name"))
        return JSONResponse(collection.to_json(), status_code=201)
    except KnowledgeError as exc:
        return _refused(exc)


async def collection(request: Request, hub: Hub, owner: str) -> Response:
    try:
        await _knowledge(request).delete_collection(owner, request.path_params["id"])
    except KnowledgeError as exc:
        return _refused(exc)
    return Response(status_code=204)


async def documents(request: Request, hub: Hub, owner: str) -> Response:
    collection_id = request.path_params["id"]
    try:
        knowledge = _knowledge(request)
        if request.method == "GET":
            found = await knowledge.documents(owner, collection_id)
            return JSONResponse({"documents": [d.to_json() for d in found]})
        try:
            body = await _json_body(request)
        except ValueError as exc:
            return _invalid(exc)
        # Indexing is work like an upload's: it counts against uploads a minute (429 past it).
        await request.app.state.quotas.upload(owner, None)
        document = await knowledge.add_document(owner, collection_id, body.get("uploadId"))
        return JSONResponse({**document.to_json(), "documentId": document.id, "status": document.status},
                            status_code=202)
    except KnowledgeError as exc:
        return _refused(exc)


async def document(request: Request, hub: Hub, owner: str) -> Response:
    try:
        await _knowledge(request).delete_document(owner, request.path_params["id"], request.path_params["doc"])
    except KnowledgeError as exc:
        return _refused(exc)
    return Response(status_code=204)


routes = [
    Route("/api/knowledge", authed(collections), methods=["GET", "POST"]),
    Route("/api/knowledge/{id}", authed(collection), methods=["DELETE"]),
    Route("/api/knowledge/{id}/documents", authed(documents), methods=["GET", "POST"]),
    Route("/api/knowledge/{id}/documents/{doc}", authed(document), methods=["DELETE"]),
]
