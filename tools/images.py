"""`generate_image` and `edit_image`: pictures made by an OpenAI-compatible images API.

Both store what the API made as a conversation file (`source="generated"`) and show it
to the model as an image block with its id, so the model sees what it made and can edit
it next. Nothing is stored that Pillow has not decoded as an image.

Masks follow OpenAI's definition: a PNG with an alpha channel, the image's size, whose
fully transparent pixels mark the area to change. `edit_image` builds one from a
rectangle (`mask_region`, fractions of the image) or a polygon (`mask_polygon`, its vertices
in the image's pixels), or takes an image of the conversation (`mask_id`), scaled to the
image when the proportions match and refused otherwise.

An edit keeps the picture's proportions: the API answers at one of its own sizes, so the
result is scaled back to the source's size (or, for a source larger than what the API
makes, to its proportions at the API's long edge), which keeps a mask's area where it was.
The Pillow work (decoding, masks, scaling, checking) is `chat_agent.image_edit`.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from langchain_core.tools import BaseTool, InjectedToolArg, tool
from pydantic import BaseModel, ConfigDict, Field

from .imaging.api import ImageApi, ImageInput
from .imaging.edit import ImageToolError, check_result, fit_mask, polygon_mask, region_mask, scaled_like, sendable
from chat_agent.tooling import (EXTENSIONS, ConversationFiles, FileError, Settings, StoredFile, ToolContext, ToolUnavailable,
                                image_block)

GENERATE_NAME = "generate_image"
EDIT_NAME = "edit_image"
TOOL_TIMEOUT = 300.0  # the API may take over a minute per image, plus reading and storing

Size = Literal["1024x1024", "1536x1024", "1024x1536", "auto"]

GENERATE = """Create an image from a text description.
Write a detailed prompt: subject, composition, style, lighting, colours, any text to show.
size: 1024x1024 (square, the default), 1536x1024 (landscape), 1024x1536 (portrait) or auto.
To base the new image on an image of the conversation (a photo, a sketch, a style to follow), give its id as
reference_image_id. To change part of an existing image, use edit_image instead.
The image is stored and shown to the user; you get it back with its id."""

EDIT = """Edit an image of the conversation (attached, generated or made by code), given by its id.
Returns a new image of the same proportions; the original stays as it was.
Without a mask the whole image may change. To change only part of it, give mask_region: the rectangle to
change, as fractions of the image's width and height (x, y of its top-left corner, width, height, all 0-1),
or mask_polygon: the outline of the area to change, as points in the image's pixels (x from the left, y from
the top; the image's width and height are given with its id), for shapes a rectangle does not fit,
or mask_id: an image of the conversation whose fully transparent pixels mark the area to change."""
MAX_POLYGON_POINTS = 1000


class MaskRegion(BaseModel):
    """A rectangle of the image, in fractions of its width and height."""

    model_config = ConfigDict(extra="forbid")
    x: float = Field(ge=0, lt=1, description="Left edge, 0 = the image's left side.")
    y: float = Field(ge=0, lt=1, description="Top edge, 0 = the image's top.")
    width: float = Field(gt=0, le=1, description="Width, 1 = the image's whole width.")
    height: float = Field(gt=0, le=1, description="Height, 1 = the image's whole height.")

    def box(self) -> tuple[float, float, float, float]:
        return self.x, self.y, self.width, self.height


class Point(BaseModel):
    """A vertex of a mask polygon, in the image's pixels."""

    model_config = ConfigDict(extra="forbid")
    x: float = Field(ge=0, description="Pixels from the image's left side.")
    y: float = Field(ge=0, description="Pixels from the image's top.")


def _api(settings: Settings) -> ImageApi:
    if not settings.image_api_base_url:
        raise ToolUnavailable("CHAT_AGENT_IMAGE_API_BASE_URL is not set")
    if not settings.image_api_key:
        raise ToolUnavailable("CHAT_AGENT_IMAGE_API_KEY is not set")
    return ImageApi(settings)


def build_generate(settings: Settings) -> BaseTool:
    api = _api(settings)

    @_timed
    @tool(GENERATE_NAME, description=GENERATE, response_format="content_and_artifact")
    async def generate_image(
        prompt: Annotated[str, Field(min_length=1, max_length=32_000, description="What to draw, in detail.")],
        ctx: Annotated[ToolContext, InjectedToolArg],
        size: Annotated[Size, Field(description="Width x height in pixels, or auto.")] = "1024x1024",
        reference_image_id: Annotated[
            str | None, Field(description="Id of an image of the conversation to base the new one on.")
        ] = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        files = ctx.files
        if reference_image_id:
            ctx.progress("Reading the reference image…")
            reference, _ = await _read_image(files, reference_image_id)
            ctx.progress("Generating image…")
            data = await api.edit(prompt, [reference], size=size)
        else:
            ctx.progress("Generating image…")
            data = await api.generate(prompt, size=size)
        made = await _store(ctx, files, data, prompt, "generated")
        said = f"Generated {made.label} from the prompt “{prompt}”"
        if reference_image_id:
            said += f", with image {reference_image_id} as reference"
        return made.answer(said, referenceImageId=reference_image_id)

    return generate_image


def build_edit(settings: Settings) -> BaseTool:
    api = _api(settings)

    @_timed
    @tool(EDIT_NAME, description=EDIT, response_format="content_and_artifact")
    async def edit_image(
        image_id: Annotated[str, Field(min_length=1, description="Id of the image to edit.")],
        instructions: Annotated[str, Field(min_length=1, max_length=32_000,
                                           description="What to change, and how the result should look.")],
        ctx: Annotated[ToolContext, InjectedToolArg],
        mask_id: Annotated[str | None, Field(
            description="Id of a mask image: its fully transparent pixels mark the area to change.")] = None,
        mask_region: Annotated[MaskRegion | None, Field(
            description="The rectangle to change, in fractions of the image; the rest stays.")] = None,
        mask_polygon: Annotated[list[Point] | None, Field(
            min_length=3, max_length=MAX_POLYGON_POINTS,
            description="The outline of the area to change, 3 or more points in the image's pixels; "
                        "the rest stays.")] = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        if sum(m is not None and m != "" for m in (mask_id, mask_region, mask_polygon)) > 1:
            raise ImageToolError("Give one of mask_id, mask_region or mask_polygon, not several.")
        files = ctx.files
        ctx.progress("Reading the image…")
        source, (width, height) = await _read_image(files, image_id)
        mask = None
        if mask_id:
            _, mask_data = await _read(files, mask_id)
            mask = await asyncio.to_thread(fit_mask, mask_data, mask_id, width, height)
        elif mask_region is not None:
            mask = await asyncio.to_thread(region_mask, mask_region.box(), width, height)
        elif mask_polygon is not None:
            mask = await asyncio.to_thread(polygon_mask, [(p.x, p.y) for p in mask_polygon], width, height)
        ctx.progress("Editing image…")
        data = await api.edit(instructions, [source], size="auto", mask=mask)
        data = await asyncio.to_thread(scaled_like, data, width, height)
        made = await _store(ctx, files, data, instructions, "edited")
        said = f"Edited image {image_id} into {made.label} following “{instructions}”"
        if mask_region is not None:
            r = mask_region
            said += f"; only the region x={r.x:g}, y={r.y:g}, width={r.width:g}, height={r.height:g} was to change"
        elif mask_polygon is not None:
            said += f"; only the inside of the {len(mask_polygon)}-point polygon was to change"
        elif mask_id:
            said += f"; only the area left transparent by mask {mask_id} was to change"
        return made.answer(said, sourceImageId=image_id)

    return edit_image


def _timed(image_tool: BaseTool) -> BaseTool:
    """Sets the timeout the registry gives the tool (set on both, so they cannot drift apart)."""
    image_tool.metadata = {"timeout": TOOL_TIMEOUT}
    return image_tool


async def _read(files: ConversationFiles, file_id: str) -> tuple[StoredFile, bytes]:
    try:
        stored, data = await files.read(file_id)
    except FileError as exc:
        if exc.code == "not_found":
            raise ImageToolError(f"There is no image {file_id} in this conversation.") from None
        raise ImageToolError(f"Could not read {file_id}: {exc.message}") from None
    if not stored.is_image:
        raise ImageToolError(f"{file_id} is {stored.filename} ({stored.media_type}), not an image.")
    return stored, data


async def _read_image(files: ConversationFiles, file_id: str) -> tuple[ImageInput, tuple[int, int]]:
    """The image as the edits endpoint takes it, and its (upright) size."""
    stored, data = await _read(files, file_id)
    return await asyncio.to_thread(sendable, data, stored.filename)


# --- Storing the result and telling the model -----------------------------------------


@dataclass(slots=True)
class _Made:
    """A stored result: the line naming it, its image block, and the UI's output."""

    label: str
    block: dict[str, Any]
    output: dict[str, Any]

    def answer(self, said: str, **from_ids: str | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The tool's (content, artifact): `said` and the image for the model; for the UI, the
        output plus the ids of the images it was made from (those given)."""
        self.output.update({key: value for key, value in from_ids.items() if value})
        return [{"type": "text", "text": said + "."}, self.block], self.output


async def _store(ctx: ToolContext, files: ConversationFiles, data: bytes, prompt: str, kind: str) -> _Made:
    checked = await asyncio.to_thread(check_result, data)
    ctx.progress("Storing…")
    stored = await files.save(data, _filename(kind, prompt, checked.media_type), source="generated")
    label, block = stored.label, image_block(checked.shown)
    output = {"imageId": stored.id, "url": files.url(stored), "width": checked.width, "height": checked.height,
              "mediaType": stored.media_type, "size": stored.size, "prompt": prompt}
    return _Made(label, block, output)


def _filename(kind: str, prompt: str, media_type: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", prompt.lower())[:40].strip("-") or "image"
    return f"{kind}-{slug}{EXTENSIONS[media_type]}"
