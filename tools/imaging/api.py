"""A client for an OpenAI-compatible images API: `POST {base}/images/generations` and `/images/edits`.

The wire format is OpenAI's: a bearer key; generations take a JSON body (`model`,
`prompt`, `size`, `n`), edits a multipart form (`image`, or `image[]` for several,
an optional `mask`, `prompt`, `model`, `size`, `n`). The answer is
`{"created", "data": [{"b64_json"} | {"url"}], "usage"}`; gpt-image models always
answer with `b64_json`, older ones (dall-e) may give a `url`, which is then
downloaded through `image_fetch.fetch_image`, so a URL the API names can never reach
our own network. Errors are `{"error": {"message", "type", "code"}}`; `ImageApiError`
carries the API's own message, since it is what says what to change (a refused
prompt, a bad size).

The bytes returned are whatever the API sent: checking that they are an image is the
caller's job (`images.prepare_image`).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from chat_agent.tooling import ImageError, PerLoop, Settings, fetch_image, one_line, shorten

TIMEOUT = 180.0  # seconds for one answer: a large, high-quality gpt-image render takes over a minute
CONNECT_TIMEOUT = 10.0
MAX_RESPONSE_BYTES = 100 * 1024 * 1024  # base64 of the largest image the API makes is ~10 MB; this is far past it

_MEANING = {
    400: "The image API rejected the request",
    401: "The image API rejected the API key (CHAT_AGENT_IMAGE_API_KEY)",
    403: "The image API refused the request",
    404: "The image API does not know this endpoint or model",
    413: "The image API found the request too large",
    429: "The image API's rate limit or quota was hit; try again in a moment",
}


class ImageApiError(RuntimeError):
    """The images API failed; the message says how, for the model and the user."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class ImageInput:
    """An image sent to the edits endpoint (the image to edit, a reference, or the mask)."""

    data: bytes
    filename: str
    media_type: str  # image/png, image/jpeg or image/webp: what the API accepts


class ImageApi:
    """One httpx client, kept for the tool's life so the TLS connection stays warm.

    An httpx.AsyncClient belongs to the event loop it first ran on: a call from another
    loop (tests) gets a new one.
    """

    def __init__(self, settings: Settings, *, timeout: float = TIMEOUT) -> None:
        if not settings.image_api_base_url or not settings.image_api_key:
            raise ValueError("the image API needs a base URL and a key")
        self._base = settings.image_api_base_url.rstrip("/")
        self._key = settings.image_api_key
        self._model = settings.image_model
        self._timeout = timeout
        self._fetch_max_bytes = settings.image_fetch_max_bytes
        self._fetch_timeout = settings.image_fetch_timeout
        self._clients = PerLoop(self._new_client)

    @property
    def model(self) -> str:
        return self._model

    async def generate(self, prompt: str, *, size: str) -> bytes:
        """The bytes of one image made from `prompt`."""
        body = {"model": self._model, "prompt": prompt, "size": size, "n": 1}
        return await self._call("/images/generations", json=body)

    async def edit(self, prompt: str, images: Sequence[ImageInput], *, size: str,
                   mask: ImageInput | None = None) -> bytes:
        """The bytes of one image made from `images` (the first is the one a mask applies to)."""
        if not images:
            raise ValueError("an edit needs at least one image")
        field = "image" if len(images) == 1 else "image[]"
        files: list[tuple[str, tuple[str, bytes, str]]] = [
            (field, (image.filename, image.data, image.media_type)) for image in images
        ]
        if mask is not None:
            files.append(("mask", (mask.filename, mask.data, mask.media_type)))
        form = {"model": self._model, "prompt": prompt, "size": size, "n": "1"}
        return await self._call("/images/edits", data=form, files=files)

    async def _call(self, path: str, **request: Any) -> bytes:
        try:
            status, raw = await self._post(path, request)
        except httpx.TimeoutException:
            raise ImageApiError(f"The image API did not answer within {self._timeout:g} seconds.") from None
        except httpx.TransportError as exc:
            raise ImageApiError(f"Could not reach the image API: {exc or type(exc).__name__}") from exc
        if status >= 400:
            raise _http_error(status, raw)
        return await self._image(_decode_json(raw))

    async def _post(self, path: str, request: dict[str, Any]) -> tuple[int, bytes]:
        headers = {"Authorization": f"Bearer {self._key}", "Accept": "application/json"}
        async with self._clients.get().stream("POST", self._base + path, headers=headers, **request) as response:
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise ImageApiError(f"The image API's answer is larger than {MAX_RESPONSE_BYTES:,} bytes.")
                chunks.append(chunk)
            return response.status_code, b"".join(chunks)

    async def _image(self, answer: Any) -> bytes:
        data = answer.get("data") if isinstance(answer, dict) else None
        first = data[0] if isinstance(data, list) and data else None
        if not isinstance(first, dict):
            raise ImageApiError("The image API answered without an image.")
        encoded = first.get("b64_json")
        if isinstance(encoded, str) and encoded:
            try:
                return base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise ImageApiError("The image API sent an image that is not valid base64.") from None
        url = first.get("url")
        if isinstance(url, str) and url:
            try:
                return await fetch_image(url, max_bytes=self._fetch_max_bytes, timeout=self._fetch_timeout)
            except ImageError as exc:
                raise ImageApiError(f"Could not download the image the API made: {exc}") from exc
        raise ImageApiError("The image API answered without an image.")

    def _new_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=httpx.Timeout(self._timeout, connect=CONNECT_TIMEOUT))

    async def aclose(self) -> None:
        client = self._clients.used_here()
        if client is not None:
            await client.aclose()


def _decode_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        raise ImageApiError(f"The image API answered with something other than JSON: {_snippet(raw)}") from None


def _http_error(status: int, raw: bytes) -> ImageApiError:
    """OpenAI's error shape is {"error": {"message", "type", "code"}}; anything else is quoted as it came."""
    detail = _snippet(raw)
    try:
        error = json.loads(raw).get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"].strip():
        detail = error["message"].strip()
    elif isinstance(error, str) and error.strip():
        detail = error.strip()
    meaning = _MEANING.get(status, "The image API is having trouble" if status >= 500 else "The image API failed")
    return ImageApiError(f"{meaning} (HTTP {status}): {shorten(detail, 500)}", status=status)


def _snippet(raw: bytes) -> str:
    text = raw[:600].decode("utf-8", "replace").strip()
    return shorten(one_line(text), 300) or "(empty)"
