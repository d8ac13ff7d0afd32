"""A real HTTP server on loopback that answers like OpenAI's images API.

`POST /images/generations` takes JSON (`model`, `prompt`, `size`, `n`, ...);
`POST /images/edits` takes a multipart form (`image` or `image[]`, optional `mask`,
`prompt`, `model`, `size`, `n`, ...). Both want `Authorization: Bearer <key>` and answer
`{"created", "data": [{"b64_json"}], "usage", "size", "output_format", ...}`; errors are
`{"error": {"message", "type", "param", "code"}}` with OpenAI's status codes.

It validates as OpenAI does (prompt and model required, size among the allowed values,
images real PNG/JPEG/WEBP under 50 MB, a mask a PNG with an alpha channel of the image's
size) and answers with REAL PNGs made with Pillow, predictable from the request:

* a generation is filled with `color_for(prompt)`, at the requested size
  (`auto`: 1024x1024);
* an edit starts from the first image, scaled to the requested size (`auto`: the allowed
  size nearest the image's proportions). With a mask, the pixels where the mask is fully
  transparent become `color_for(prompt)` and the rest is the image; without one, every
  pixel is `blend(image pixel, color_for(prompt))`.

    with FakeImages() as api:
        settings = Settings(image_api_base_url=api.base_url, image_api_key=api.api_key)
        api.fail_next(429)             # the next request gets a 429 with OpenAI's error body
        api.serve_next(b"not a png")   # the next success carries these bytes as b64_json
        api.answer_with_url = True     # answers carry `url` (served by the fake) instead of b64
        api.requests[-1].files["mask"][0].data
        api.reset()
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from PIL import Image
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.loopback import LoopbackServer

SIZES = ("1024x1024", "1024x1536", "1536x1024")
MAX_IMAGE_BYTES = 50 * 1024 * 1024
IMAGE_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}
COMMON_FIELDS = {"prompt", "model", "n", "size", "quality", "background", "output_format",
                 "output_compression", "moderation", "user", "response_format", "stream", "partial_images"}
EDIT_FIELDS = COMMON_FIELDS - {"moderation"} | {"input_fidelity"}
DEFAULT_MESSAGES = {
    400: "Invalid request.",
    401: "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
    403: "Your organization must be verified to use the model `gpt-image-1`.",
    429: "Rate limit reached for gpt-image-1 in organization org-test on images per minute: Limit 5, Used 5.",
    500: "The server had an error while processing your request. Sorry about that!",
    503: "The engine is currently overloaded, please try again later.",
}
ERROR_TYPES = {401: "invalid_request_error", 429: "requests", 500: "server_error", 503: "server_error"}
ERROR_CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}


@dataclass(frozen=True, slots=True)
class Upload:
    filename: str | None
    content_type: str | None
    data: bytes


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: dict[str, Any]  # the JSON object, or a form's text fields
    files: dict[str, list[Upload]] = field(default_factory=dict)  # a form's files by field name


class OpenAIError(Exception):
    def __init__(self, message: str, *, param: str | None = None, code: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.param, self.code, self.status = message, param, code, status


class FakeImages(LoopbackServer):
    name = "images"

    def __init__(self, *, api_key: str = "sk-images-test", delay: float = 0.0) -> None:
        super().__init__()
        self.api_key = api_key
        self.delay = delay
        self.answer_with_url = False
        self.requests: list[RecordedRequest] = []
        self._failures: deque[tuple[int, str | None]] = deque()
        self._payloads: deque[bytes] = deque()
        self._served: dict[str, bytes] = {}

    @property
    def base_url(self) -> str:
        """Like "https://api.openai.com/v1": the paths are appended to it."""
        return f"{super().base_url}/v1"

    def fail_next(self, status: int, message: str | None = None, *, times: int = 1) -> None:
        """Answer the next `times` requests with `status` and OpenAI's error body."""
        self._failures.extend([(status, message)] * times)

    def serve_next(self, data: bytes) -> None:
        """The next successful answer carries `data` (base64) instead of the image it would make."""
        self._payloads.append(data)

    def reset(self) -> None:
        self.requests.clear()
        self._failures.clear()
        self._payloads.clear()
        self._served.clear()
        self.delay = 0.0
        self.answer_with_url = False

    def routes(self) -> list[Route]:
        return [
            Route("/v1/images/generations", self._generations, methods=["POST"]),
            Route("/v1/images/edits", self._edits, methods=["POST"]),
            Route("/v1/files/{name}", self._file, methods=["GET"]),
        ]

    # --- endpoints ----------------------------------------------------------------------

    async def _generations(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self.requests.append(RecordedRequest(request.method, request.url.path, dict(request.headers),
                                             body if isinstance(body, dict) else {"raw": raw.decode("utf-8", "replace")}))
        return await self._answer(request, lambda: _generate(body))

    async def _edits(self, request: Request) -> Response:
        fields: dict[str, Any] = {}
        files: dict[str, list[Upload]] = {}
        try:
            form = await request.form(max_files=32)
        except Exception as exc:  # noqa: BLE001 - a body that is not multipart
            form = None
            fields["raw"] = str(exc)
        else:
            for key, value in form.multi_items():
                if isinstance(value, UploadFile):
                    files.setdefault(key, []).append(Upload(value.filename, value.content_type, await value.read()))
                else:
                    fields[key] = value
        self.requests.append(RecordedRequest(request.method, request.url.path, dict(request.headers), fields, files))
        return await self._answer(request, lambda: _edit(form is not None, fields, files))

    async def _file(self, request: Request) -> Response:
        data = self._served.get(request.path_params["name"])
        if data is None:
            return Response(status_code=404)
        return Response(data, media_type="image/png")

    async def _answer(self, request: Request, make: Any) -> Response:
        if self._failures:
            status, message = self._failures.popleft()
            return _error(OpenAIError(message or DEFAULT_MESSAGES.get(status, f"Error {status}"), status=status,
                                      code=ERROR_CODES.get(status)))
        auth = request.headers.get("authorization", "")
        if not auth.startswith("Bearer ") or not auth[7:].strip():
            return _error(OpenAIError("You didn't provide an API key. You need to provide your API key in an "
                                      "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                                      status=401))
        if auth[7:].strip() != self.api_key:
            return _error(OpenAIError(DEFAULT_MESSAGES[401], status=401, code="invalid_api_key"))
        await self._wait(self.delay)
        try:
            images, size, usage = make()
        except OpenAIError as exc:
            return _error(exc)
        if self._payloads:
            images = [self._payloads.popleft(), *images[1:]]
        data = []
        for image in images:
            if self.answer_with_url:
                name = f"{len(self._served) + 1}.png"
                self._served[name] = image
                data.append({"url": f"{self.base_url}/files/{name}"})
            else:
                data.append({"b64_json": base64.b64encode(image).decode("ascii")})
        return JSONResponse({"created": int(time.time()), "background": "opaque", "data": data,
                             "output_format": "png", "quality": "medium", "size": size, "usage": usage})


# --- what the fake makes ----------------------------------------------------------------


def color_for(prompt: str) -> tuple[int, int, int]:
    """The colour a prompt paints with: the same prompt, the same colour."""
    digest = hashlib.sha256(prompt.encode()).digest()
    return digest[0], digest[1], digest[2]


def blend(pixel: tuple[int, ...], color: tuple[int, int, int]) -> tuple[int, int, int]:
    """An unmasked edit's pixel: halfway between the image's and the prompt's colour."""
    return tuple((a + b) // 2 for a, b in zip(pixel[:3], color))  # type: ignore[return-value]


def nearest_size(width: int, height: int) -> str:
    """What `auto` gives for an edit: the allowed size nearest the image's proportions."""
    return min(SIZES, key=lambda s: abs(_dims(s)[0] / _dims(s)[1] - width / height))


def _generate(body: Any) -> tuple[list[bytes], str, dict[str, Any]]:
    if not isinstance(body, dict):
        raise OpenAIError("We could not parse the JSON body of your request. (HINT: This likely means you aren't "
                          "using your HTTP library correctly. The OpenAI API expects a JSON payload.)")
    prompt, n, size = _common(body, COMMON_FIELDS)
    size = "1024x1024" if size == "auto" else size
    image = _png(Image.new("RGB", _dims(size), color_for(prompt)))
    return [image] * n, size, _usage(prompt, 0)


def _edit(parsed: bool, fields: dict[str, Any], files: dict[str, list[Upload]]) -> tuple[list[bytes], str, dict[str, Any]]:
    if not parsed:
        raise OpenAIError("Invalid multipart form: the edits endpoint takes multipart/form-data.")
    unknown = sorted((set(fields) | set(files)) - EDIT_FIELDS - {"image", "image[]", "mask"})
    if unknown:
        raise OpenAIError(f"Unknown parameter: '{unknown[0]}'.", param=unknown[0], code="unknown_parameter")
    as_text = sorted(fields.keys() & {"image", "image[]", "mask"})
    if as_text:
        raise OpenAIError(f"Invalid type for '{as_text[0]}': expected a file, but got a string instead.",
                          param=as_text[0], code="invalid_type")
    prompt, n, size = _common(fields, EDIT_FIELDS)
    uploads = files.get("image", []) + files.get("image[]", [])
    if not uploads:
        raise OpenAIError("Missing required parameter: 'image'.", param="image", code="missing_required_parameter")
    if len(uploads) > 16:
        raise OpenAIError("Too many images: at most 16 may be given.", param="image", code="invalid_value")
    images = [_input_image(upload, "image", n) for n, upload in enumerate(uploads, 1)]
    first = images[0]
    masks = files.get("mask", [])
    if len(masks) > 1:
        raise OpenAIError("Only one mask may be given.", param="mask", code="invalid_value")
    mask = _mask(masks[0], first.size) if masks else None
    size = nearest_size(*first.size) if size == "auto" else size
    out = first.convert("RGB").resize(_dims(size), Image.Resampling.BILINEAR)
    color = color_for(prompt)
    if mask is not None:
        hole = mask.resize(_dims(size), Image.Resampling.NEAREST).point(lambda a: 255 if a == 0 else 0)
        out.paste(color, (0, 0, *out.size), hole)
    else:
        out = Image.blend(out, Image.new("RGB", out.size, color), 0.5)
    return [_png(out)] * n, size, _usage(prompt, len(images))


def _common(body: dict[str, Any], allowed: set[str]) -> tuple[str, int, str]:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise OpenAIError(f"Unknown parameter: '{unknown[0]}'.", param=unknown[0], code="unknown_parameter")
    prompt = body.get("prompt")
    if prompt is None:
        raise OpenAIError("Missing required parameter: 'prompt'.", param="prompt", code="missing_required_parameter")
    if not isinstance(prompt, str) or not prompt.strip():
        raise OpenAIError("Invalid 'prompt': empty string. Expected a string with minimum length 1.", param="prompt",
                          code="empty_string")
    if len(prompt) > 32_000:
        raise OpenAIError("Invalid 'prompt': string too long. Expected a string with maximum length 32000.",
                          param="prompt", code="string_above_max_length")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise OpenAIError("Missing required parameter: 'model'.", param="model", code="missing_required_parameter")
    if "response_format" in body and model.startswith("gpt-image"):
        raise OpenAIError("Unknown parameter: 'response_format'.", param="response_format", code="unknown_parameter")
    size = body.get("size", "auto")
    if size not in (*SIZES, "auto"):
        raise OpenAIError(f"Invalid value: '{size}'. Supported values are: '1024x1024', '1024x1536', '1536x1024', "
                          "and 'auto'.", param="size", code="invalid_value")
    try:
        n = int(body.get("n", 1))
    except (TypeError, ValueError):
        n = 0
    if not 1 <= n <= 10:
        raise OpenAIError(f"Invalid 'n': {body.get('n')!r}. Expected a value between 1 and 10.", param="n",
                          code="invalid_value")
    return prompt, n, size


def _input_image(upload: Upload, param: str, index: int) -> Image.Image:
    if len(upload.data) > MAX_IMAGE_BYTES:
        raise OpenAIError(f"Invalid file '{param}': the file is larger than 50 MB.", param=param, code="invalid_value")
    image = _decode(upload.data)
    mimetype = upload.content_type or "application/octet-stream"
    if image is None and mimetype in IMAGE_TYPES.values():
        raise OpenAIError(f"Invalid image file or mode for image {index}, please check your image file.",
                          param=param, code="invalid_image")
    if image is None or image.format not in IMAGE_TYPES:
        raise OpenAIError(f"Invalid file '{param}': unsupported mimetype ('{mimetype}'). Supported file formats "
                          "are 'image/jpeg', 'image/png', and 'image/webp'.", param=param, code="invalid_image_format")
    return image


def _mask(upload: Upload, size: tuple[int, int]) -> Image.Image:
    """The mask's alpha channel; 400 unless it is a PNG with alpha, of the image's size."""
    if len(upload.data) > MAX_IMAGE_BYTES:
        raise OpenAIError("Invalid file 'mask': the file is larger than 50 MB.", param="mask", code="invalid_value")
    image = _decode(upload.data)
    if image is None or image.format != "PNG":
        raise OpenAIError("Invalid mask image format - mask must be a PNG file.", param="mask",
                          code="invalid_image_format")
    if not (image.mode in ("RGBA", "LA", "PA") or image.has_transparency_data):
        raise OpenAIError("Invalid mask image format - mask image missing alpha channel", param="mask",
                          code="invalid_image_format")
    if image.size != size:
        raise OpenAIError(f"Invalid mask: the mask's size ({image.width}x{image.height}) does not match the "
                          f"image's size ({size[0]}x{size[1]}).", param="mask", code="invalid_image_dimensions")
    return image.convert("RGBA").getchannel("A")


def _decode(data: bytes) -> Image.Image | None:
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
        return image
    except Exception:  # noqa: BLE001 - not an image
        return None


def _dims(size: str) -> tuple[int, int]:
    width, height = size.split("x")
    return int(width), int(height)


def _png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def _usage(prompt: str, images: int) -> dict[str, Any]:
    text_tokens = max(1, len(prompt) // 4)
    image_tokens = 323 * images
    return {"input_tokens": text_tokens + image_tokens, "output_tokens": 1056,
            "total_tokens": text_tokens + image_tokens + 1056,
            "input_tokens_details": {"image_tokens": image_tokens, "text_tokens": text_tokens}}


def _error(exc: OpenAIError) -> JSONResponse:
    return JSONResponse({"error": {"message": exc.message, "type": ERROR_TYPES.get(exc.status, "invalid_request_error"),
                                   "param": exc.param, "code": exc.code}}, status_code=exc.status)
