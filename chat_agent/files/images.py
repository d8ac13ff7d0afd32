"""Checking an image before it reaches the model: `prepare_image`.

The bytes are untrusted (an upload, or what `image_fetch.fetch_image` downloaded). The
format is decided by Pillow from the bytes, never from a name, and only PNG, JPEG, GIF
and WEBP are accepted (Anthropic's image types). The size the header declares is checked
before any pixel is decoded, so a decompression bomb costs a header parse; Pillow's own
bomb checks count as errors too, and its global `Image.MAX_IMAGE_PIXELS` is left alone.

What comes out is what an image block carries:

* an image that is already fine (long edge within `long_edge`, upright, one frame, not
  CMYK, small enough) is sent as it came, byte for byte, once it has decoded cleanly (a
  PNG less any ancillary chunk with a bad checksum: see `png.py`);
* otherwise the first frame is decoded, turned upright by its EXIF orientation, scaled
  so its long edge is `long_edge` (Anthropic's recommended 1568 px) and re-encoded: PNG
  stays PNG (optimized), JPEG stays JPEG (quality 90), WEBP stays WEBP (quality 90), and
  GIF becomes PNG (re-quantizing a scaled frame to GIF's 256 colours would spoil it).
  An animated GIF, WEBP or PNG therefore becomes its first frame, as a still image;
* if that is still over `max_bytes`, it becomes a JPEG (transparency flattened on white)
  of falling quality, then of falling size, until it fits.

`max_bytes` bounds the base64 form of the data, since that is what the Anthropic API
measures against its 5 MB per-image limit (raw bytes may be up to 3/4 of it).
"""

from __future__ import annotations

import base64
import io
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

from chat_agent.files import png

MEDIA_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}
_FORMATS = tuple(MEDIA_TYPES)
_ALIASES = {"MPO": "JPEG"}  # Pillow's JPEG opener names a camera's multi-picture JPEG "MPO"
_ORIENTATION = 0x0112  # the EXIF tag
_QUALITY = 90
_FALLBACK_QUALITIES = (85, 70)
_SMALLEST_EDGE = 256  # below this, shrinking further to fit max_bytes is not worth it


class ImageError(ValueError):
    """An image we will not send. The message is safe to show the client as it is."""


@dataclass(frozen=True, slots=True)
class PreparedImage:
    media_type: str
    data: bytes
    width: int
    height: int


def image_block(image: PreparedImage) -> dict:
    """The Messages API content block that shows the model this image."""
    return {"type": "image", "source": {"type": "base64", "media_type": image.media_type,
                                        "data": base64.b64encode(image.data).decode("ascii")}}


def base64_size(n: int) -> int:
    """How long n bytes are once base64-encoded."""
    return 4 * ((n + 2) // 3)


def prepare_image(data: bytes, *, max_pixels: int = 40_000_000, long_edge: int = 1568,
                  max_bytes: int = 5 * 1024 * 1024) -> PreparedImage:
    """Checks untrusted image bytes and returns what to send the model (see the module doc).

    Raises ImageError for anything that is not a sound PNG, JPEG, GIF or WEBP image of
    at most `max_pixels` pixels. CPU-bound: an async caller runs it in a thread.
    """
    if not data:
        raise ImageError("The image is empty.")
    data = png.mend(data)
    fmt = _verify(data, max_pixels)
    with _reading(data), _open(data, max_pixels) as image:
        animated = getattr(image, "n_frames", 1) > 1
        upright = image.getexif().get(_ORIENTATION, 1) == 1
        if (not animated and upright and image.mode != "CMYK" and max(image.size) <= long_edge
                and base64_size(len(data)) <= max_bytes):
            image.load()  # decodes every pixel: a truncated or corrupt file fails here
            return PreparedImage(MEDIA_TYPES[fmt], data, *image.size)
        frame = _decode(image, long_edge)
    return _encode(frame, "PNG" if fmt == "GIF" else fmt, max_bytes)


def image_format(data: bytes) -> str | None:
    """The allowed format ("PNG", "JPEG", "GIF", "WEBP") Pillow reads in the bytes' header,
    or None. Only identifies: nothing is decoded, no size is checked."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=_FORMATS) as image:
                return _ALIASES.get(image.format or "", image.format)
    except Exception:  # noqa: BLE001 - a parser's error on untrusted bytes just means "no"
        return None


def _verify(data: bytes, max_pixels: int) -> str:
    """Identifies the format, checks the declared size and the file's structure (PNG chunk
    checksums, say). Pillow needs a fresh open after `verify`, hence a function of its own."""
    with _reading(data), _open(data, max_pixels) as image:
        fmt = _ALIASES.get(image.format or "", image.format or "")
        image.verify()
    if fmt not in MEDIA_TYPES:
        raise ImageError("The image must be a PNG, JPEG, GIF or WEBP file.")
    return fmt


def _open(data: bytes, max_pixels: int) -> Image.Image:
    """Opens (parses the header only) and refuses too many pixels before anything is decoded."""
    image = Image.open(io.BytesIO(data), formats=_FORMATS)
    width, height = image.size
    if width < 1 or height < 1:
        image.close()
        raise ImageError("The image has no pixels.")
    if width * height > max_pixels:
        image.close()
        raise ImageError(f"The image is too large: {width}x{height} pixels, "
                         f"the limit is {max_pixels:,} pixels.")
    return image


@contextmanager
def _reading(data: bytes) -> Iterator[None]:
    """Turns whatever Pillow raises on untrusted bytes into an ImageError that says why.

    Pillow's DecompressionBombWarning is made an error here. (`catch_warnings` is the
    warnings module's own process-wide state on Python 3.11; it is restored on exit.)"""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            yield
    except ImageError:
        raise
    except UnidentifiedImageError:
        raise ImageError(_not_an_image(data)) from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ImageError("The image declares too many pixels to decode safely.") from None
    except MemoryError:
        raise ImageError("The image is too large to decode.") from None
    except Exception as exc:  # noqa: BLE001 - Pillow's plugins raise many kinds on bad input
        raise ImageError("The image file is damaged or incomplete.") from exc


# Formats Pillow is not asked to read, by their first bytes (HEIC and AVIF: after the box size).
_OTHER_FORMATS = ((0, b"BM", "a BMP image"), (0, b"II*\0", "a TIFF image"), (0, b"MM\0*", "a TIFF image"),
                  (0, b"\0\0\1\0", "an ICO icon"), (4, b"ftypheic", "a HEIC image"),
                  (4, b"ftypavif", "an AVIF image"), (0, b"%PDF-", "a PDF document"), (0, b"PK\3\4", "a ZIP archive"))


def _not_an_image(data: bytes) -> str:
    """Why bytes Pillow could not identify are refused, saying what they are instead."""
    if data.startswith(png.SIGNATURE):
        return f"The PNG image is damaged: {png.damage(data) or 'its data cannot be read'}."
    other = next((name for at, magic, name in _OTHER_FORMATS if data[at:at + len(magic)] == magic), None)
    if other and other.endswith(("image", "icon")):
        return f"The file is {other}; an image must be a PNG, JPEG, GIF or WEBP file."
    if other is None and _looks_like_text(data):
        head = data[:512].decode("utf-8", "replace").lstrip().lower()
        other = ("an SVG drawing" if "<svg" in head else "an HTML page" if head.startswith(("<!doctype html", "<html"))
                 else "text")
    if other:
        return f"The file is {other}, not an image."
    return (f"The file is not an image (it starts with the bytes {data[:8].hex(' ')}); an image must be a PNG, "
            "JPEG, GIF or WEBP file.")


def _looks_like_text(data: bytes) -> bool:
    head = data[:1024]
    return b"\0" not in head and head.decode("utf-8", "replace").count("\ufffd") <= 1


def _decode(image: Image.Image, long_edge: int) -> Image.Image:
    """The first frame, decoded, upright, in a mode every encoder takes, long edge <= long_edge."""
    if image.format in ("JPEG", "MPO"):
        # libjpeg can decode at 1/2, 1/4 or 1/8 scale: never more pixels than needed.
        scale = min(1.0, long_edge / max(image.size))
        image.draft(None, (max(1, round(image.width * scale)), max(1, round(image.height * scale))))
    image.load()
    frame = ImageOps.exif_transpose(image)
    if frame.mode not in ("RGB", "RGBA", "L", "LA"):
        frame = frame.convert("RGBA" if frame.has_transparency_data else "RGB")
    if max(frame.size) > long_edge:
        frame.thumbnail((long_edge, long_edge), Image.Resampling.LANCZOS)
    return frame


def _encode(frame: Image.Image, fmt: str, max_bytes: int) -> PreparedImage:
    data = _save(frame, fmt, _QUALITY)
    if base64_size(len(data)) <= max_bytes:
        return PreparedImage(MEDIA_TYPES[fmt], data, *frame.size)
    flat = _flatten(frame)
    while True:
        for quality in _FALLBACK_QUALITIES:
            data = _save(flat, "JPEG", quality)
            if base64_size(len(data)) <= max_bytes:
                return PreparedImage("image/jpeg", data, *flat.size)
        if max(flat.size) <= _SMALLEST_EDGE:
            raise ImageError("The image is too large to send, even compressed.")
        flat = flat.resize((max(1, flat.width * 3 // 4), max(1, flat.height * 3 // 4)),
                           Image.Resampling.LANCZOS)


def _save(frame: Image.Image, fmt: str, quality: int) -> bytes:
    out = io.BytesIO()
    if fmt == "PNG":
        frame.save(out, "PNG", optimize=True)
    elif fmt == "JPEG":
        _flatten(frame).save(out, "JPEG", quality=quality, optimize=True)
    else:
        frame.save(out, fmt, quality=quality)
    return out.getvalue()


def _flatten(frame: Image.Image) -> Image.Image:
    """RGB or L, transparency composited on white: what JPEG can hold."""
    if frame.mode in ("RGB", "L"):
        return frame
    rgba = frame.convert("RGBA")
    flat = Image.new("RGB", rgba.size, "white")
    flat.paste(rgba, mask=rgba.getchannel("A"))
    return flat
