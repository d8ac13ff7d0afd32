"""Which browsers may use the server (PROTOCOL.md 1.1, "Browsers: origins, hosts and CORS").

With auth off (the default on loopback) any web page could otherwise drive the server: open
the WebSocket, read every conversation, upload files. Three pure-ASGI layers, outermost
first, each covering HTTP requests and WebSocket handshakes alike (BaseHTTPMiddleware would
break the WebSocket and streamed responses):

- HostGuard: a `Host` we do not serve is refused with 400. Only this stops DNS rebinding: a
  rebound page is same-origin with itself, and browsers send no `Origin` on same-origin GETs.
- OriginGuard: a page of another origin is refused with 403 `forbidden_origin`, auth or not.
  A request without `Origin` (curl, the Python client) is not a browser's and passes.
- CORS: allowed origins get Starlette's CORS headers; a preflight answers 204.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocketClose

from chat_agent.config import Settings
from chat_agent.web.auth import LOOPBACK_HOSTS
from chat_agent.web.errors import error

LOCAL_PAGES = ("http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*")
_TRUSTED = "chat_agent.trusted_host"  # the scope key HostGuard's check leaves when the host is fine


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def allowed_origins(settings: Settings) -> tuple[str, ...]:
    """CHAT_AGENT_ALLOWED_ORIGINS, or: our own origin, and local pages while on loopback."""
    if settings.allowed_origins:
        return settings.allowed_origins
    own = f"http://{_bracketed(settings.host)}:{settings.port}"
    return (own, *LOCAL_PAGES) if settings.host in LOOPBACK_HOSTS else (own,)


def allowed_hosts(settings: Settings) -> tuple[str, ...]:
    """CHAT_AGENT_ALLOWED_HOSTS, or: the host we listen on and the loopback names."""
    return settings.allowed_hosts or (_bracketed(settings.host).lower(), "localhost", "127.0.0.1", "[::1]")


def origin_regex(origins: tuple[str, ...]) -> str:
    """One pattern for Starlette's CORSMiddleware and our own check alike; `:*` is any port
    (or none), `*` any origin."""
    parts = [".*" if o == "*" else re.escape(o[:-2]) + r"(?::\d+)?" if o.endswith(":*") else re.escape(o)
             for o in origins]
    return "(?i:" + "|".join(parts) + ")"


async def _refuse(response: Response, scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "websocket" and "websocket.http.response" not in scope.get("extensions", {}):
        # A server without the denial extension answers a handshake closed before accept with 403.
        await WebSocketClose()(scope, receive, send)
    else:
        await response(scope, receive, send)  # on a handshake: the denial response, our JSON and all


async def _discard(message: Message) -> None:
    pass


class HostGuard:
    """Starlette's TrustedHostMiddleware decides (it parses `Host`, IPv6 literals and `*.`
    patterns included); its plain-text refusal is discarded for our JSON error."""

    def __init__(self, app: ASGIApp, hosts: tuple[str, ...]):
        self.app = app
        self._check = TrustedHostMiddleware(self._trusted, allowed_hosts=list(hosts), www_redirect=False)

    @staticmethod
    async def _trusted(scope: Scope, receive: Receive, send: Send) -> None:
        scope[_TRUSTED] = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            await self._check(scope, receive, _discard)
            if not scope.pop(_TRUSTED, False):
                host = Headers(scope=scope).get("host", "")
                message = (f"This server does not answer to the host {host!r} (CHAT_AGENT_ALLOWED_HOSTS "
                           "lists the names it serves).")
                await _refuse(error(400, "invalid_request", message), scope, receive, send)
                return
        await self.app(scope, receive, send)


class OriginGuard:
    """Refuses requests and handshakes from pages of origins that are neither allowed nor our own."""

    def __init__(self, app: ASGIApp, pattern: str):
        self.app = app
        self.pattern = re.compile(pattern)

    def allows(self, origin: str, host: str) -> bool:
        # Same origin: the page came from the very host it calls (already checked by HostGuard),
        # whatever name or proxy put us there.
        return bool(self.pattern.fullmatch(origin)) or urlsplit(origin).netloc.lower() == host.lower()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = Headers(scope=scope)
            origin = headers.get("origin")
            if origin is not None and not self.allows(origin, headers.get("host", "")):
                message = f"Pages from {origin} may not use this server (CHAT_AGENT_ALLOWED_ORIGINS)."
                await _refuse(error(403, "forbidden_origin", message), scope, receive, send)
                return
        await self.app(scope, receive, send)


class CORS(CORSMiddleware):
    """Starlette's CORS, with the preflight answered by 204 and a refused one (a method or a
    header we do not take) by our JSON error."""

    def preflight_response(self, request_headers: Headers) -> Response:
        answer = super().preflight_response(request_headers)
        headers = {k: v for k, v in answer.headers.items() if k not in ("content-length", "content-type")}
        if answer.status_code >= 400:
            return error(400, "invalid_request", f"{answer.body.decode()} (the preflight asked for "
                         f"{request_headers.get('access-control-request-method')} with headers "
                         f"{request_headers.get('access-control-request-headers') or 'none'}).", headers)
        return Response(status_code=204, headers=headers)


def browser_middleware(settings: Settings) -> list[Middleware]:
    pattern = origin_regex(allowed_origins(settings))
    return [
        Middleware(HostGuard, hosts=allowed_hosts(settings)),
        Middleware(OriginGuard, pattern=pattern),
        # An allowed origin may be a public site calling us on a private address: Chrome then
        # asks first (Private Network Access), and the origin's being allowed is the answer.
        Middleware(CORS, allow_origin_regex=pattern, allow_methods=("GET", "POST", "PUT", "DELETE"),
                   allow_headers=("Authorization", "Content-Type"), expose_headers=("Content-Disposition",),
                   allow_private_network=True),
    ]
