"""The HTTP routes of PROTOCOL.md besides the WebSocket, the canvas (canvas_routes) and paged
reading (history_routes)."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from chat_agent.config import PROVIDERS, Settings
from chat_agent.web.auth import LOOPBACK_HOSTS, Authenticator
from chat_agent.web.errors import error
from chat_agent.sessions.hub import Hub
from chat_agent.protocol import json_schema
from chat_agent.quotas.quotas import camel
from chat_agent.store import ConversationRecord
from chat_agent import tracing

Handler = Callable[[Request, Hub, str], Awaitable[Response]]


def authed(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """Resolves the caller (401 otherwise) and hands the handler the hub and the owner."""
    async def endpoint(request: Request) -> Response:
        hub: Hub = request.app.state.hub
        owner = await caller(request)
        if owner is None:
            return error(401, "unauthorized", "A valid token is required.")
        return await handler(request, hub, owner)
    return endpoint


def summary(record: ConversationRecord, running: bool) -> dict[str, Any]:
    return {"id": record.id, "title": record.title, "createdAt": record.created_at,
            "updatedAt": record.updated_at, "running": running}


async def caller(request: Request) -> str | None:
    auth: Authenticator = request.app.state.auth
    return await auth.user(request.headers, request.query_params)


async def health(request: Request) -> JSONResponse:
    """`{"status": "ok"}` to anyone; what is configured (models, storage, tools, instance) only
    to a signed-in caller, or to anyone when auth is off and the server listens on loopback
    only (the one local user). An open server tells strangers nothing to aim at."""
    hub: Hub = request.app.state.hub
    settings = hub.settings
    if settings.auth_enabled:
        if request.headers.get("authorization") or request.query_params.get("token"):
            if await caller(request) is None:
                return error(401, "unauthorized", "A valid token is required for the details; without one, "
                                                  "/health answers only its status.")
            return request.app.state.health.response(hub)
        return JSONResponse({"status": "ok"})
    if settings.host in LOOPBACK_HOSTS:
        return request.app.state.health.response(hub)
    return JSONResponse({"status": "ok"})


async def usage(request: Request, hub: Hub, owner: str) -> JSONResponse:
    """The caller's use of each quota and its limit (PROTOCOL 1.2 "Quotas")."""
    return JSONResponse({"user": owner, "quotas": await request.app.state.quotas.usage(owner)})


class HealthDetails:
    """/health's details, rendered once and again only when what they show can have changed
    (the tools' availability, tracing): a monitor polls it, and reading the package's
    metadata and rendering it all on every call made it ~4× a bare endpoint."""

    def __init__(self, version: str):
        self._version = version
        self._key: tuple[object, ...] | None = None
        self._body = b""

    def response(self, hub: Hub) -> Response:
        key = (tuple(hub.agent.registry.availability()), tracing.exporting())
        if key != self._key:
            self._key, self._body = key, JSONResponse(_details(hub, self._version)).body
        return Response(self._body, media_type="application/json")


def _details(hub: Hub, version: str) -> dict[str, Any]:
    settings = hub.settings
    return {
        "status": "ok", "version": version, "model": settings.model, "smallModel": settings.small_model,
        "anthropic": {"configured": bool(settings.anthropic_api_key)},  # 1.0's field; all of them in `providers`
        "providers": _providers(settings), "demo": settings.demo,
        "auth": settings.auth_enabled, "storage": hub.store.kind,
        "signIn": {"apiKeys": bool(settings.api_keys), "jwtIssuer": settings.jwt_issuer},
        "limits": {camel(name): value for name, value in settings.limits.items()},
        "instance": {"id": hub.ownership.instance, "bus": hub.bus.kind, "jobs": hub.jobs.queue.kind},
        "files": {"storage": "s3" if settings.s3_bucket else "local", "uploadMaxBytes": settings.upload_max_bytes},
        "tools": [info.model_dump(exclude_none=True) for info in hub.tools()],
        "tracing": tracing.exporting(),  # spans exported (OTEL_EXPORTER_OTLP_ENDPOINT), or the API's no-op
    }


def _providers(settings: Settings) -> dict[str, dict[str, Any]]:
    """Each model provider the configured models use: its models, and whether its key is set
    (else which variable is missing)."""
    shown: dict[str, dict[str, Any]] = {}
    for provider, models in settings.providers().items():
        configured = bool(settings.provider_key(provider))
        shown[provider] = {"configured": configured, "models": models}
        if not configured:
            shown[provider]["missing"] = PROVIDERS[provider]
        if provider == "openai":
            shown[provider]["baseUrl"] = settings.openai_base_url or "https://api.openai.com/v1"
    return shown


async def get_conversation(request: Request, hub: Hub, owner: str) -> Response:
    conversation_id = request.path_params["id"]
    record = await hub.store.get_conversation(owner, conversation_id)
    if record is None:
        return error(404, "not_found", "No such conversation.")
    live = hub.live(owner, conversation_id)
    body = summary(record, hub.is_running(conversation_id))
    if live is not None:
        body["title"] = live.title
    artifact = await hub.artifact(owner, conversation_id)
    body.update(messages=[m.model_dump(mode="json") for m in await hub.visible_messages(owner, conversation_id)],
                artifact=artifact.model_dump(mode="json") if artifact else None,
                usage=await hub.store.usage_totals(owner, conversation_id))
    return JSONResponse(body)


async def delete_conversation(request: Request, hub: Hub, owner: str) -> Response:
    if not await hub.delete(owner, request.path_params["id"]):
        return error(404, "not_found", "No such conversation.")
    return Response(status_code=204)


async def protocol_schema(request: Request) -> JSONResponse:
    return JSONResponse(json_schema())


routes = [
    Route("/health", health, methods=["GET"]),
    Route("/api/conversations/{id}", authed(get_conversation), methods=["GET"]),
    Route("/api/conversations/{id}", authed(delete_conversation), methods=["DELETE"]),
    Route("/api/protocol", protocol_schema, methods=["GET"]),
    Route("/api/usage", authed(usage), methods=["GET"]),
]
