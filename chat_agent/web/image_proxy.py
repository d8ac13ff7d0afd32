"""`GET /api/image-proxy?url=…`: an image from elsewhere that the user chose to see.

The canvas page never loads a third-party image by itself (page.py); when the user clicks a
placeholder, it asks this route, which fetches the image under the SSRF rules of image
attachments (`fetch_image`: public addresses only, every redirect checked, bounded size and
time), checks that the bytes are an image, and answers them from our origin with headers that
keep a browser from treating them as anything else. The third party sees our server, never the
user's browser (no cookies, no Referer, no IP address of the user).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from chat_agent.files.image_fetch import fetch_image
from chat_agent.files.images import MEDIA_TYPES, ImageError, image_format
from chat_agent.sessions.hub import Hub
from chat_agent.web.errors import error
from chat_agent.web.http import authed

MAX_URL = 4096


async def image_proxy(request: Request, hub: Hub, owner: str) -> Response:
    url = request.query_params.get("url", "")
    if not url.startswith(("http://", "https://")) or len(url) > MAX_URL:
        return error(400, "invalid_request", f"`url` must be an http(s) URL of at most {MAX_URL} characters.")
    settings = hub.settings
    try:
        data = await fetch_image(url, max_bytes=settings.image_fetch_max_bytes, timeout=settings.image_fetch_timeout)
    except ImageError as exc:
        return error(400, "invalid_request", f"The image was not loaded: {exc}")
    kind = image_format(data)
    if kind not in MEDIA_TYPES:
        return error(415, "unsupported_type", "The URL did not answer a PNG, JPEG, GIF or WEBP image.")
    return Response(data, media_type=MEDIA_TYPES[kind], headers={
        "X-Content-Type-Options": "nosniff", "Content-Security-Policy": "default-src 'none'; sandbox",
        "Cache-Control": "private, max-age=3600", "Referrer-Policy": "no-referrer"})


routes = [Route("/api/image-proxy", authed(image_proxy), methods=["GET"])]
