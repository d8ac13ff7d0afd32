"""The canvas page: `GET /` and its files under `/static/`, served as package data.

The page is plain HTML, CSS and JavaScript modules (no build step) and uses only the public
protocol, the WebSocket and the HTTP routes, like any other client. Its responses carry a
Content-Security-Policy that allows nothing but this origin: the page renders what a model
wrote, and no markup in there may load or run anything.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

STATIC = Path(__file__).resolve().parent / "static"

# 'self' covers the same-origin WebSocket (ws: and wss:) in CSP Level 3 browsers; images may
# come from anywhere an attachment or a generated image lives (S3's public URL, say).
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob: https: http:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           # the files change with the package: revalidate rather than run a stale module
           "Cache-Control": "no-cache"}


async def index(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", media_type="text/html", headers=HEADERS)


class _Static(StaticFiles):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], *((k.lower().encode(), v.encode())
                                                             for k, v in HEADERS.items())]
            await send(message)
        await super().__call__(scope, receive, with_headers)


routes = [
    Route("/", index, methods=["GET"]),
    Mount("/static", app=_Static(directory=STATIC), name="static"),
]
