"""Pillow work for the image tools: inputs made sendable, masks, results scaled back and checked.

The bytes are a conversation's files or what the images API returned, so every function
here opens them with the pixel count checked before anything is decoded. All of it is
CPU-bound: the tools run each call in a thread.

Masks follow OpenAI's definition: a PNG with an alpha channel, the image's size, whose
fully transparent pixels mark the area to change.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

from PIL import Image, ImageDraw, ImageOps

from .api import ImageApiError, ImageInput
from chat_agent.tooling import IMAGE_MEDIA_TYPES as MEDIA_TYPES
from chat_agent.tooling import ImageError, PreparedImage, prepare_image

MAX_PIXELS = 40_000_000  # as prepare_image: above this, an input is refused before decoding
_SENDABLE = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}  # what the edits endpoint takes
_ORIENTATION = 0x0112
_ASPECT_TOLERANCE = 0.01  # a mask this close to the image's proportions is a scaled copy of it


class ImageToolError(RuntimeError):
    """A problem with the tool's input (an unknown id, an unusable mask); the message says what to change."""


def sendable(data: bytes, filename: str) -> tuple[ImageInput, tuple[int, int]]:
    """The bytes as they are when the API takes them (PNG, JPEG, WEBP; one frame; upright),
    otherwise the first frame, upright, as PNG: the edit and any mask must see the image
    as the model saw it. Also the image's (upright) size."""
    what = f"The image {filename}"
    with _open(data, what) as image:
        fmt = "JPEG" if image.format == "MPO" else image.format
        upright = image.getexif().get(_ORIENTATION, 1) == 1
        if fmt in _SENDABLE and getattr(image, "n_frames", 1) == 1 and upright:
            _decoded(image, what)  # decodes every pixel: a broken file fails here, not at the API
            return ImageInput(data, _named(filename, fmt), _SENDABLE[fmt]), image.size
        frame = _plain(_decoded(image, what))
        return ImageInput(_png(frame), _named(filename, "PNG"), "image/png"), frame.size


def region_mask(box: tuple[float, float, float, float], width: int, height: int) -> ImageInput:
    """An opaque PNG of the image's size, transparent inside `box` (x, y, width, height as
    fractions of the image)."""
    x, y, box_width, box_height = box
    left, top = math.floor(x * width), math.floor(y * height)
    right = min(width, math.ceil((x + box_width) * width))
    bottom = min(height, math.ceil((y + box_height) * height))
    if right <= left or bottom <= top:
        raise ImageToolError(f"mask_region covers no pixel of the {width}×{height} image.")
    mask = Image.new("RGBA", (width, height), (0, 0, 0, 255))
    mask.paste((0, 0, 0, 0), (left, top, right, bottom))
    return ImageInput(_png(mask), "mask.png", "image/png")


def polygon_mask(points: list[tuple[float, float]], width: int, height: int) -> ImageInput:
    """An opaque PNG of the image's size, transparent inside the polygon (its vertices in the
    image's pixels, x right and y down from the top-left corner; pixels on its edge count as
    inside, as Pillow draws them)."""
    outside = [(x, y) for x, y in points if not (0 <= x <= width and 0 <= y <= height)]
    if outside:
        x, y = outside[0]
        raise ImageToolError(f"mask_polygon point ({x:g}, {y:g}) is outside the {width}×{height} image: "
                             "give points in its pixels, 0 to its width and height.")
    alpha = Image.new("L", (width, height), 255)
    ImageDraw.Draw(alpha).polygon(points, fill=0)
    if alpha.getextrema()[0] != 0:
        raise ImageToolError("mask_polygon covers no pixel of the image.")
    mask = Image.new("RGBA", (width, height), (0, 0, 0, 255))
    mask.putalpha(alpha)
    return ImageInput(_png(mask), "mask.png", "image/png")


def fit_mask(data: bytes, mask_id: str, width: int, height: int) -> ImageInput:
    """The mask as OpenAI wants it: RGBA PNG of the image's size."""
    what = f"The mask {mask_id}"
    with _open(data, what) as opened:
        mask = _decoded(opened, what)
        if not (mask.mode in ("RGBA", "LA", "PA") or mask.has_transparency_data):
            raise ImageToolError(
                f"{what} has no transparency. In a mask, fully transparent pixels mark the area to change "
                "(or give mask_region instead).")
        mask = mask.convert("RGBA")
    if mask.getchannel("A").getextrema()[0] != 0:
        raise ImageToolError(f"{what} has no fully transparent pixel, so it marks nothing to change.")
    if mask.size != (width, height):
        mw, mh = mask.size
        if abs((mw / mh) / (width / height) - 1) > _ASPECT_TOLERANCE:
            raise ImageToolError(
                f"{what} is {mw}×{mh} but the image is {width}×{height}: a mask must have the image's size "
                "or at least its proportions.")
        mask = mask.resize((width, height), Image.Resampling.NEAREST)  # keeps transparent pixels fully transparent
    return ImageInput(_png(mask), "mask.png", "image/png")


def scaled_like(data: bytes, width: int, height: int) -> bytes:
    """The API's image in the source's proportions: at the source's size, or, for a source
    larger than what the API made, at the API's long edge (upscaling adds bytes, not detail)."""
    try:
        image = _open(data, "it")
        with image:
            scale = min(1.0, max(image.size) / max(width, height))
            target = (max(1, round(width * scale)), max(1, round(height * scale)))
            if image.size == target:
                return data  # checked whole, with the rest, before it is stored
            frame = _decoded(image, "it")
    except ImageToolError as exc:
        raise _not_an_image(str(exc)) from None
    return _png(_plain(frame).resize(target, Image.Resampling.LANCZOS))


@dataclass(frozen=True, slots=True)
class Checked:
    shown: PreparedImage  # the copy the model sees (scaled down if need be)
    media_type: str  # of the bytes stored
    width: int  # of the bytes stored, upright
    height: int


def check_result(data: bytes) -> Checked:
    """Decodes the whole image the API made (ImageApiError if it is not one) and makes the
    model's copy of it."""
    try:
        shown = prepare_image(data, max_pixels=MAX_PIXELS)
    except ImageError as exc:
        raise _not_an_image(str(exc)) from None
    with Image.open(io.BytesIO(data), formats=tuple(MEDIA_TYPES)) as image:
        fmt = "JPEG" if image.format == "MPO" else str(image.format)
        width, height = image.size
        if image.getexif().get(_ORIENTATION, 1) in (5, 6, 7, 8):  # turned a quarter: shown the other way round
            width, height = height, width
    return Checked(shown, MEDIA_TYPES[fmt], width, height)


def _not_an_image(detail: str) -> ImageApiError:
    return ImageApiError(f"The image API returned something that is not a usable image: {detail}")


def _open(data: bytes, what: str) -> Image.Image:
    """Opens (header only) and refuses too many pixels before anything is decoded."""
    try:
        image = Image.open(io.BytesIO(data), formats=tuple(MEDIA_TYPES))
    except Exception:  # noqa: BLE001 - any parser error on these bytes means "not an image we take"
        raise ImageToolError(f"{what} is not a PNG, JPEG, GIF or WEBP image.") from None
    if image.width * image.height > MAX_PIXELS:
        image.close()
        raise ImageToolError(f"{what} is too large ({image.width}×{image.height} pixels).")
    return image


def _decoded(image: Image.Image, what: str) -> Image.Image:
    """The first frame, decoded and upright."""
    try:
        image.load()
        return ImageOps.exif_transpose(image)
    except Exception:  # noqa: BLE001 - a truncated or corrupt file
        raise ImageToolError(f"{what} is damaged or incomplete.") from None


def _plain(frame: Image.Image) -> Image.Image:
    """A mode PNG stores and resizing handles well (not a palette, not CMYK)."""
    if frame.mode in ("RGB", "RGBA", "L", "LA"):
        return frame
    return frame.convert("RGBA" if frame.has_transparency_data else "RGB")


def _png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def _named(filename: str, fmt: str) -> str:
    stem = filename.rsplit(".", 1)[0] or "image"
    return stem + {"PNG": ".png", "JPEG": ".jpg", "WEBP": ".webp"}[fmt]
