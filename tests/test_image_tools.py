"""generate_image and edit_image against a fake OpenAI images API (a real HTTP server on loopback
returning real PNGs), run through a real ToolRegistry with the conversation's real files."""

from __future__ import annotations

import asyncio
import base64
import io
import socket
import time
from typing import Any

import httpx
import pytest
from PIL import Image, ImageChops

from chat_agent.files.blobs import LocalBlobs
from chat_agent.config import Settings
from chat_agent.files.catalog import Files
from chat_agent.store import CreateConversation
from tools.imaging.api import ImageApi, ImageApiError
from chat_agent.tooling import ToolRegistry, ToolResult, ToolServices, ToolUnavailable
from tests.cancelling import cancel_within
from tests.fakes.images_fake import FakeImages, blend, color_for, nearest_size
from tools import images

OWNER, CONVERSATION = "owner-1", "conv-1"
PROMPT = "a lighthouse at dusk, watercolour"
BLUE, GREEN, WHITE = (20, 40, 200), (30, 180, 60), (255, 255, 255)


@pytest.fixture
async def files(db, tmp_path):  # noqa: ANN001 - the conftest fixture's store and writer
    store, writer = db
    await writer.wait_for(writer.submit([CreateConversation(OWNER, CONVERSATION, time.time())]))
    return Files(store, writer, LocalBlobs(tmp_path / "blobs"), max_bytes=20 * 1024 * 1024).scoped(OWNER, CONVERSATION)


def settings_for(images_api: FakeImages, **overrides: Any) -> Settings:
    return Settings(**{"image_api_base_url": images_api.base_url, "image_api_key": images_api.api_key, **overrides})


def registry_for(images_api: FakeImages, *, timeout: float | None = None, **overrides: Any) -> ToolRegistry:
    registry = ToolRegistry()
    for build in (images.build_generate, images.build_edit):
        tool = build(settings_for(images_api, **overrides))
        registry.add(tool, timeout=timeout or tool.metadata["timeout"])
    return registry


async def call(registry: ToolRegistry, files: Any, name: str, tool_input: dict[str, Any],
               statuses: list[str] | None = None) -> ToolResult:
    sink = statuses if statuses is not None else []
    return await registry.run(
        "toolu_img", name, tool_input, conversation_id=CONVERSATION, owner=OWNER,
        on_progress=lambda _id, _elapsed, status: sink.append(status), services=ToolServices(files=files),
    )  # fmt: skip


def encoded(image: Image.Image, image_format: str = "PNG") -> bytes:
    out = io.BytesIO()
    image.save(out, image_format)
    return out.getvalue()


def png(size: tuple[int, int], color: Any = BLUE, mode: str = "RGB") -> bytes:
    return encoded(Image.new(mode, size, color))


def two_tone(size: tuple[int, int]) -> bytes:
    """Left half blue, right half green: a copy that moved or blurred would show."""
    image = Image.new("RGB", size, BLUE)
    image.paste(GREEN, (size[0] // 2, 0, *size))
    return encoded(image)


def mask_png(size: tuple[int, int], hole: tuple[int, int, int, int], opaque: Any = (0, 0, 0, 255)) -> bytes:
    """A mask as OpenAI defines one: opaque but for `hole`, fully transparent, the area to change."""
    mask = Image.new("RGBA", size, opaque)
    mask.paste((0, 0, 0, 0), hole)
    return encoded(mask)


def opened(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


async def stored_image(files: Any, result: ToolResult) -> Image.Image:
    stored, data = await files.read(result.output["imageId"])
    assert stored.source == "generated" and stored.media_type == "image/png"
    return opened(data)


def shown_image(result: ToolResult) -> Image.Image:
    """The image block the model got back."""
    (text, block) = result.content
    assert text["type"] == "text" and block["type"] == "image"
    assert block["source"]["type"] == "base64" and block["source"]["media_type"] == "image/png"
    return opened(base64.b64decode(block["source"]["data"]))


def close(a: tuple[int, ...], b: tuple[int, ...], tolerance: int = 3) -> bool:
    return all(abs(x - y) <= tolerance for x, y in zip(a, b))


# --- generate_image ---------------------------------------------------------------------


async def test_generate_stores_a_real_png_and_shows_it(images_api: FakeImages, files: Any) -> None:
    statuses: list[str] = []
    result = await call(registry_for(images_api), files, "generate_image", {"prompt": PROMPT}, statuses)
    assert not result.is_error, result.content
    output = result.output
    image_id = output["imageId"]
    stored, data = await files.read(image_id)
    assert output == {"imageId": image_id, "url": files.url(stored), "width": 1024, "height": 1024,
                      "mediaType": "image/png", "size": len(data), "prompt": PROMPT}
    assert stored.filename.startswith("generated-a-lighthouse-at-dusk") and stored.filename.endswith(".png")
    image = opened(data)
    assert image.size == (1024, 1024) and image.getpixel((500, 500)) == color_for(PROMPT)
    assert result.content[0]["text"] == (
        f"Generated [image {image_id}: {stored.filename}, 1024×1024] from the prompt “{PROMPT}”.")
    assert shown_image(result).tobytes() == image.tobytes()  # the model sees what it made
    assert [f.id for f in await files.images()] == [image_id]
    assert statuses == ["Generating image…", "Storing…"]


async def test_generate_speaks_openais_wire_format(images_api: FakeImages, files: Any) -> None:
    await call(registry_for(images_api, image_model="gpt-image-1-mini"), files, "generate_image",
               {"prompt": PROMPT, "size": "1536x1024"})
    (request,) = images_api.requests
    assert (request.method, request.path) == ("POST", "/v1/images/generations")
    assert request.headers["authorization"] == f"Bearer {images_api.api_key}"
    assert request.headers["content-type"] == "application/json"
    assert request.body == {"model": "gpt-image-1-mini", "prompt": PROMPT, "size": "1536x1024", "n": 1}


@pytest.mark.parametrize(("size", "dims"), [("1536x1024", (1536, 1024)), ("1024x1536", (1024, 1536)),
                                            ("auto", (1024, 1024))])
async def test_generate_sizes(images_api: FakeImages, files: Any, size: str, dims: tuple[int, int]) -> None:
    result = await call(registry_for(images_api), files, "generate_image", {"prompt": PROMPT, "size": size})
    assert (result.output["width"], result.output["height"]) == dims
    assert (await stored_image(files, result)).size == dims
    assert f"{dims[0]}×{dims[1]}]" in result.content[0]["text"]


async def test_generate_refuses_a_size_the_api_does_not_make(images_api: FakeImages, files: Any) -> None:
    result = await call(registry_for(images_api), files, "generate_image", {"prompt": PROMPT, "size": "512x512"})
    assert result.is_error and result.content.startswith("Invalid input for generate_image: size:")
    assert images_api.requests == []


async def test_generate_with_a_reference_image(images_api: FakeImages, files: Any) -> None:
    reference_bytes = png((800, 600), BLUE)
    reference = await files.save(reference_bytes, "sketch.png", source="upload")
    statuses: list[str] = []
    result = await call(registry_for(images_api), files, "generate_image",
                        {"prompt": PROMPT, "size": "1024x1536", "reference_image_id": reference.id}, statuses)
    assert not result.is_error, result.content
    (request,) = images_api.requests
    assert request.path == "/v1/images/edits" and request.headers["content-type"].startswith("multipart/form-data")
    assert request.body == {"model": "gpt-image-1", "prompt": PROMPT, "size": "1024x1536", "n": "1"}
    (sent,) = request.files["image"]
    assert sent.data == reference_bytes and sent.content_type == "image/png" and "mask" not in request.files
    image = await stored_image(files, result)
    assert image.size == (1024, 1536) and image.getpixel((512, 768)) == blend(BLUE, color_for(PROMPT))
    assert result.output["referenceImageId"] == reference.id
    assert result.content[0]["text"].endswith(f"with image {reference.id} as reference.")
    assert statuses == ["Reading the reference image…", "Generating image…", "Storing…"]


# --- edit_image -------------------------------------------------------------------------


async def test_edit_with_a_mask_region_changes_only_that_region(images_api: FakeImages, files: Any) -> None:
    source_bytes = two_tone((1024, 1024))
    source = await files.save(source_bytes, "photo.png", source="upload")
    instructions = "put a red boat here"
    region = {"x": 0.25, "y": 0.5, "width": 0.5, "height": 0.25}
    statuses: list[str] = []
    result = await call(registry_for(images_api), files, "edit_image",
                        {"image_id": source.id, "instructions": instructions, "mask_region": region}, statuses)
    assert not result.is_error, result.content

    (request,) = images_api.requests
    assert request.path == "/v1/images/edits" and request.body["prompt"] == instructions
    assert request.files["image"][0].data == source_bytes
    mask = opened(request.files["mask"][0].data)
    assert mask.format == "PNG" and mask.mode == "RGBA" and mask.size == (1024, 1024)
    box = (256, 512, 768, 768)
    assert mask.getchannel("A").getbbox() is not None
    assert ImageChops.invert(mask.getchannel("A")).getbbox() == box  # transparent exactly inside the region

    edited = await stored_image(files, result)
    original = opened(source_bytes)
    assert edited.size == original.size
    inside = edited.crop(box)
    assert inside.getcolors() == [(512 * 256, color_for(instructions))]
    outside = edited.copy()
    outside.paste(original.crop(box), box)
    assert ImageChops.difference(outside, original).getbbox() is None  # not one pixel changed elsewhere

    assert result.output["sourceImageId"] == source.id and result.output["prompt"] == instructions
    assert result.content[0]["text"].startswith(f"Edited image {source.id} into [image {result.output['imageId']}: ")
    assert "only the region x=0.25, y=0.5, width=0.5, height=0.25 was to change" in result.content[0]["text"]
    assert statuses == ["Reading the image…", "Editing image…", "Storing…"]
    assert [f.id for f in await files.images()] == [source.id, result.output["imageId"]]


async def test_an_edit_keeps_the_images_size(images_api: FakeImages, files: Any) -> None:
    """The API answers at its own size (800x600 becomes 1536x1024); the result is scaled back."""
    source_bytes = two_tone((800, 600))
    source = await files.save(source_bytes, "photo.png", source="upload")
    result = await call(registry_for(images_api), files, "edit_image", {
        "image_id": source.id, "instructions": "a moon", "mask_region": {"x": 0.5, "y": 0, "width": 0.5, "height": 0.5}})
    assert not result.is_error, result.content
    assert nearest_size(800, 600) == "1536x1024" and images_api.requests[0].body["size"] == "auto"
    edited = await stored_image(files, result)
    assert edited.size == (800, 600) and (result.output["width"], result.output["height"]) == (800, 600)
    assert close(edited.getpixel((600, 150)), color_for("a moon"))  # inside the region (top right)
    assert close(edited.getpixel((600, 450)), GREEN) and close(edited.getpixel((200, 300)), BLUE)  # outside


async def test_an_edit_of_a_large_image_keeps_its_proportions_at_the_apis_resolution(
        images_api: FakeImages, files: Any) -> None:
    source = await files.save(two_tone((2048, 1536)), "photo.png", source="upload")
    result = await call(registry_for(images_api), files, "edit_image", {
        "image_id": source.id, "instructions": "a moon", "mask_region": {"x": 0.5, "y": 0, "width": 0.5, "height": 0.5}})
    assert not result.is_error, result.content
    assert opened(images_api.requests[0].files["mask"][0].data).size == (2048, 1536)  # the mask fits the image sent
    edited = await stored_image(files, result)
    assert edited.size == (1536, 1152)  # 4:3 like the source, long edge as the API's 1536x1024: no upscaling
    assert close(edited.getpixel((1100, 300)), color_for("a moon")) and close(edited.getpixel((1100, 900)), GREEN)
    assert close(shown_image(result).getpixel((300, 500)), BLUE)


async def test_edit_without_a_mask_may_change_everything(images_api: FakeImages, files: Any) -> None:
    source = await files.save(png((1024, 1024), BLUE), "photo.png", source="upload")
    result = await call(registry_for(images_api), files, "edit_image", {"image_id": source.id, "instructions": "dusk"})
    assert not result.is_error, result.content
    assert "mask" not in images_api.requests[0].files
    assert (await stored_image(files, result)).getcolors() == [(1024 * 1024, blend(BLUE, color_for("dusk")))]


async def test_edit_with_a_mask_image(images_api: FakeImages, files: Any) -> None:
    source_bytes = two_tone((1024, 1024))
    source = await files.save(source_bytes, "photo.png", source="upload")
    box = (100, 200, 400, 300)
    mask = await files.save(mask_png((1024, 1024), box, (255, 255, 255, 255)), "mask.png", source="upload")
    result = await call(registry_for(images_api), files, "edit_image",
                        {"image_id": source.id, "instructions": "a door", "mask_id": mask.id})
    assert not result.is_error, result.content
    sent = opened(images_api.requests[0].files["mask"][0].data)
    assert sent.size == (1024, 1024) and ImageChops.invert(sent.getchannel("A")).getbbox() == box
    edited, original = await stored_image(files, result), opened(source_bytes)
    assert edited.crop(box).getcolors() == [(300 * 100, color_for("a door"))]
    outside = edited.copy()
    outside.paste(original.crop(box), box)
    assert ImageChops.difference(outside, original).getbbox() is None
    assert f"only the area left transparent by mask {mask.id} was to change" in result.content[0]["text"]


async def test_a_smaller_mask_of_the_same_proportions_is_scaled(images_api: FakeImages, files: Any) -> None:
    source = await files.save(png((1024, 1024), BLUE), "photo.png", source="upload")
    mask = await files.save(mask_png((256, 256), (0, 0, 128, 256)), "mask.png", source="upload")  # left half
    result = await call(registry_for(images_api), files, "edit_image",
                        {"image_id": source.id, "instructions": "sky", "mask_id": mask.id})
    assert not result.is_error, result.content
    sent = opened(images_api.requests[0].files["mask"][0].data)
    assert sent.size == (1024, 1024) and ImageChops.invert(sent.getchannel("A")).getbbox() == (0, 0, 512, 1024)
    edited = await stored_image(files, result)
    assert edited.getpixel((100, 500)) == color_for("sky") and edited.getpixel((900, 500)) == BLUE


async def test_a_mask_of_other_proportions_is_refused(images_api: FakeImages, files: Any) -> None:
    source = await files.save(png((1024, 1024)), "photo.png", source="upload")
    mask = await files.save(png((300, 500), (0, 0, 0, 0), "RGBA"), "mask.png", source="upload")
    result = await call(registry_for(images_api), files, "edit_image",
                        {"image_id": source.id, "instructions": "x", "mask_id": mask.id})
    assert result.is_error and result.content == (
        f"ImageToolError: The mask {mask.id} is 300×500 but the image is 1024×1024: a mask must have the image's "
        "size or at least its proportions.")
    assert images_api.requests == []


async def test_a_mask_without_transparency_is_refused(images_api: FakeImages, files: Any) -> None:
    source = await files.save(png((1024, 1024)), "photo.png", source="upload")
    flat = await files.save(png((1024, 1024), WHITE), "mask.png", source="upload")
    opaque = await files.save(png((1024, 1024), (0, 0, 0, 255), "RGBA"), "opaque.png", source="upload")
    registry = registry_for(images_api)
    no_alpha = await call(registry, files, "edit_image", {"image_id": source.id, "instructions": "x", "mask_id": flat.id})
    assert no_alpha.is_error and f"The mask {flat.id} has no transparency." in no_alpha.content
    nothing = await call(registry, files, "edit_image", {"image_id": source.id, "instructions": "x", "mask_id": opaque.id})
    assert nothing.is_error and "has no fully transparent pixel, so it marks nothing to change" in nothing.content
    assert images_api.requests == []


async def test_mask_id_and_mask_region_together_are_refused(images_api: FakeImages, files: Any) -> None:
    source = await files.save(png((64, 64)), "photo.png", source="upload")
    result = await call(registry_for(images_api), files, "edit_image", {
        "image_id": source.id, "instructions": "x", "mask_id": source.id,
        "mask_region": {"x": 0, "y": 0, "width": 1, "height": 1}})
    assert result.is_error and result.content == "ImageToolError: Give one of mask_id, mask_region or mask_polygon, not several."


async def test_a_bad_mask_region_is_refused_before_the_api(images_api: FakeImages, files: Any) -> None:
    source = await files.save(png((64, 64)), "photo.png", source="upload")
    result = await call(registry_for(images_api), files, "edit_image", {
        "image_id": source.id, "instructions": "x", "mask_region": {"x": 0.2, "y": 0, "width": 0, "height": 1}})
    assert result.is_error and result.content.startswith("Invalid input for edit_image: mask_region.width:")
    assert images_api.requests == []


async def test_a_gif_is_sent_as_png(images_api: FakeImages, files: Any) -> None:
    source = await files.save(encoded(Image.new("P", (300, 200), 3), "GIF"), "anim.gif", source="upload")
    result = await call(registry_for(images_api), files, "edit_image", {"image_id": source.id, "instructions": "x"})
    assert not result.is_error, result.content
    (sent,) = images_api.requests[0].files["image"]
    assert sent.filename == "anim.png" and sent.content_type == "image/png" and opened(sent.data).format == "PNG"
    assert (await stored_image(files, result)).size == (300, 200)


# --- ids that are not usable images -----------------------------------------------------


@pytest.mark.parametrize("tool_name", ["edit_image", "generate_image"])
async def test_an_unknown_image_id_is_an_error(images_api: FakeImages, files: Any, tool_name: str) -> None:
    missing = "file_" + "0" * 24
    tool_input = ({"image_id": missing, "instructions": "x"} if tool_name == "edit_image"
                  else {"prompt": "x", "reference_image_id": missing})
    result = await call(registry_for(images_api), files, tool_name, tool_input)
    assert result.is_error and result.content == f"ImageToolError: There is no image {missing} in this conversation."
    assert images_api.requests == []


async def test_a_document_is_not_an_image(images_api: FakeImages, files: Any) -> None:
    notes = await files.save(b"just some notes\n", "notes.txt", source="upload")
    result = await call(registry_for(images_api), files, "edit_image", {"image_id": notes.id, "instructions": "x"})
    assert result.is_error and result.content == (
        f"ImageToolError: {notes.id} is notes.txt (text/plain), not an image.")


# --- the API failing --------------------------------------------------------------------


@pytest.mark.parametrize(("status", "message", "meaning"), [
    (400, "Your request was rejected as a result of our safety system.", "The image API rejected the request"),
    (429, "Rate limit reached for gpt-image-1.", "The image API's rate limit or quota was hit; try again in a moment"),
    (500, "The server had an error while processing your request.", "The image API is having trouble"),
])
async def test_api_errors_carry_the_apis_message(images_api: FakeImages, files: Any, status: int, message: str,
                                                 meaning: str) -> None:
    images_api.fail_next(status, message)
    result = await call(registry_for(images_api), files, "generate_image", {"prompt": PROMPT})
    assert result.is_error and result.content == f"ImageApiError: {meaning} (HTTP {status}): {message}"
    assert await files.images() == []


async def test_the_apis_validation_message_reaches_the_model(images_api: FakeImages, files: Any) -> None:
    source = await files.save(png((64, 64)), "photo.png", source="upload")
    images_api.fail_next(400, "Invalid mask image format - mask image missing alpha channel")
    result = await call(registry_for(images_api), files, "edit_image", {"image_id": source.id, "instructions": "x"})
    assert result.content == ("ImageApiError: The image API rejected the request (HTTP 400): "
                              "Invalid mask image format - mask image missing alpha channel")


async def test_a_wrong_key_is_an_error_that_does_not_show_the_key(images_api: FakeImages, files: Any) -> None:
    registry = registry_for(images_api, image_api_key="sk-wrong-key")
    result = await call(registry, files, "generate_image", {"prompt": PROMPT})
    assert result.is_error and result.content.startswith(
        "ImageApiError: The image API rejected the API key (CHAT_AGENT_IMAGE_API_KEY) (HTTP 401): Incorrect API key")
    assert "sk-wrong-key" not in result.content


@pytest.mark.parametrize("tool_name", ["generate_image", "edit_image"])
async def test_bytes_that_are_not_an_image_are_never_stored(images_api: FakeImages, files: Any, tool_name: str) -> None:
    source = await files.save(png((64, 64)), "photo.png", source="upload")
    images_api.serve_next(b"<html>this is not a png</html>")
    tool_input = {"prompt": PROMPT} if tool_name == "generate_image" else {"image_id": source.id, "instructions": "x"}
    result = await call(registry_for(images_api), files, tool_name, tool_input)
    assert result.is_error
    assert result.content.startswith("ImageApiError: The image API returned something that is not a usable image:")
    assert [f.id for f in await files.images()] == [source.id]


async def test_a_url_answer_pointing_at_a_private_address_is_not_fetched(images_api: FakeImages, files: Any) -> None:
    images_api.answer_with_url = True  # like dall-e: data[0].url instead of b64_json; here it is on 127.0.0.1
    result = await call(registry_for(images_api), files, "generate_image", {"prompt": PROMPT})
    assert result.content == ("ImageApiError: Could not download the image the API made: "
                              "The image URL points to a private or reserved network address.")
    assert await files.images() == []


async def test_an_unreachable_api_is_an_error(files: Any) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    registry = ToolRegistry()
    registry.add(images.build_generate(Settings(image_api_base_url=f"http://127.0.0.1:{port}/v1", image_api_key="k")))
    result = await call(registry, files, "generate_image", {"prompt": PROMPT})
    assert result.is_error and result.content.startswith("ImageApiError: Could not reach the image API")


async def test_a_slow_api_times_out_in_the_client(images_api: FakeImages) -> None:
    images_api.delay = 2.0
    client = ImageApi(settings_for(images_api), timeout=0.3)
    with pytest.raises(ImageApiError, match=r"^The image API did not answer within 0.3 seconds\.$"):
        await client.generate(PROMPT, size="auto")
    await client.aclose()


async def test_a_slow_api_gets_heartbeats_and_the_registry_timeout(images_api: FakeImages, files: Any) -> None:
    images_api.delay = 2.0
    registry = ToolRegistry(heartbeat=0.1)
    registry.add(images.build_generate(settings_for(images_api)), timeout=0.35)
    statuses: list[str] = []
    result = await call(registry, files, "generate_image", {"prompt": PROMPT}, statuses)
    assert result.is_error and result.content == "Tool generate_image timed out after 0.35 s"
    assert statuses[0] == "Generating image…" and statuses.count("Generating image…") >= 3


async def test_abort_during_generation_returns_at_once(images_api: FakeImages, files: Any) -> None:
    images_api.delay = 5.0
    task = asyncio.create_task(call(registry_for(images_api), files, "generate_image", {"prompt": PROMPT}))
    while not images_api.requests:
        await asyncio.sleep(0.01)
    await cancel_within(task, 0.2)
    assert await files.images() == []


# --- configuration and schemas ----------------------------------------------------------


@pytest.mark.parametrize("build", [images.build_generate, images.build_edit])
def test_not_offered_without_configuration(build: Any) -> None:
    with pytest.raises(ToolUnavailable, match="^CHAT_AGENT_IMAGE_API_BASE_URL is not set$"):
        build(Settings())
    with pytest.raises(ToolUnavailable, match="^CHAT_AGENT_IMAGE_API_KEY is not set$"):
        build(Settings(image_api_base_url="https://images_api.openai.com/v1"))


def test_schemas(images_api: FakeImages) -> None:
    registry = registry_for(images_api)
    generate, edit = registry.schemas()
    assert generate["name"] == "generate_image" and generate["input_schema"]["required"] == ["prompt"]
    properties = generate["input_schema"]["properties"]
    assert list(properties) == ["prompt", "size", "reference_image_id"]
    assert properties["size"]["enum"] == ["1024x1024", "1536x1024", "1024x1536", "auto"]
    assert properties["size"]["default"] == "1024x1024"
    assert edit["name"] == "edit_image" and edit["input_schema"]["required"] == ["image_id", "instructions"]
    region = edit["input_schema"]["properties"]["mask_region"]
    assert "ctx" not in edit["input_schema"]["properties"] and "x" in str(region) and "height" in str(region)
    for build in (images.build_generate, images.build_edit):
        assert build(settings_for(images_api)).metadata == {"timeout": images.TOOL_TIMEOUT}


def test_fake_validates_like_openai(images_api: FakeImages) -> None:
    auth = {"Authorization": f"Bearer {images_api.api_key}"}
    good = {"model": "gpt-image-1", "prompt": "p"}
    with httpx.Client(base_url=images_api.base_url) as client:
        def error(response: httpx.Response, status: int) -> dict[str, Any]:
            assert response.status_code == status, response.text
            body = response.json()["error"]
            assert set(body) == {"message", "type", "param", "code"}
            return body

        assert error(client.post("/images/generations", json=good), 401)["message"].startswith("You didn't provide")
        assert error(client.post("/images/generations", json=good, headers={"Authorization": "Bearer no"}),
                     401)["code"] == "invalid_api_key"
        assert error(client.post("/images/generations", json={"model": "m"}, headers=auth), 400)["param"] == "prompt"
        assert error(client.post("/images/generations", json={"prompt": "p"}, headers=auth), 400)["param"] == "model"
        assert error(client.post("/images/generations", json={**good, "size": "10x10"}, headers=auth),
                     400)["code"] == "invalid_value"
        assert error(client.post("/images/generations", json={**good, "colour": "red"}, headers=auth),
                     400)["code"] == "unknown_parameter"
        answer = client.post("/images/generations", json={**good, "size": "1024x1536", "n": 2}, headers=auth).json()
        assert len(answer["data"]) == 2 and answer["usage"]["total_tokens"] > 0 and answer["size"] == "1024x1536"
        assert opened(base64.b64decode(answer["data"][0]["b64_json"])).size == (1024, 1536)

        text = {"image": ("a.txt", b"hello", "text/plain")}
        assert "unsupported mimetype ('text/plain')" in error(
            client.post("/images/edits", data=good, files=text, headers=auth), 400)["message"]
        image = ("a.png", png((64, 64)), "image/png")
        no_alpha = {"image": image, "mask": ("m.png", png((64, 64), WHITE), "image/png")}
        assert "missing alpha channel" in error(
            client.post("/images/edits", data=good, files=no_alpha, headers=auth), 400)["message"]
        wrong_size = {"image": image, "mask": ("m.png", png((32, 32), (0, 0, 0, 0), "RGBA"), "image/png")}
        assert error(client.post("/images/edits", data=good, files=wrong_size, headers=auth),
                     400)["code"] == "invalid_image_dimensions"
        assert error(client.post("/images/edits", data=good, headers=auth), 400)["param"] == "image"
        several = [("image[]", image), ("image[]", ("b.png", png((64, 64), GREEN), "image/png"))]
        answer = client.post("/images/edits", data={**good, "size": "1024x1024"}, files=several, headers=auth).json()
        assert opened(base64.b64decode(answer["data"][0]["b64_json"])).getpixel((0, 0)) == blend(BLUE, color_for("p"))
