"""The file and research tools from a real client: generate and edit an image with a mask,
run code on an attached image, deep research with progress."""

from __future__ import annotations

import base64
import os
import io

import httpx
import pytest
from PIL import Image

from tests.conftest import server_env
from tests.fakes.anthropic_fake import Reply, ToolUse
from tests.support import ServerProcess, connect, send, text_of, until


@pytest.fixture(scope="module")
def tools_server(tmp_path_factory, fake_anthropic, fake_exa, fake_images):
    env = server_env(fake_anthropic, fake_exa, CHAT_AGENT_IMAGE_API_BASE_URL=fake_images.base_url,
                     CHAT_AGENT_IMAGE_API_KEY=fake_images.api_key)
    with ServerProcess(tmp_path_factory.mktemp("tools"), env) as server:
        yield server


def fetch_image(server: ServerProcess, url: str) -> Image.Image:
    response = httpx.get(server.http_url + url if url.startswith("/") else url, timeout=10)
    assert response.status_code == 200, response.text
    image = Image.open(io.BytesIO(response.content))
    image.load()
    return image


async def turn(ws, content: str, **extra) -> list[dict]:
    await send(ws, type="message", content=content, **extra)
    return await until(ws, "done", timeout=90)


def tool_ends(frames: list[dict]) -> list[dict]:
    return [f for f in frames if f["type"] == "tool_end"]


async def test_tools_are_offered_only_when_configured(tools_server, server):
    _, configured = await connect(tools_server)
    offered = {t["name"]: t for t in configured["tools"]}
    assert offered["generate_image"]["enabled"] and offered["edit_image"]["enabled"]
    assert offered["analyze_document"]["enabled"]
    _, plain = await connect(server)
    missing = {t["name"]: t for t in plain["tools"]}["generate_image"]
    assert not missing["enabled"] and "CHAT_AGENT_IMAGE_API_BASE_URL" in missing["reason"]


async def test_generate_then_edit_with_a_mask(tools_server, fake_anthropic, fake_images):
    ws, _ = await connect(tools_server)
    fake_anthropic.enqueue(Reply([ToolUse("generate_image", {"prompt": "a calm blue sea", "size": "1024x1024"})]),
                           Reply("Here is your sea."))
    frames = await turn(ws, "Paint a calm sea")
    end = tool_ends(frames)[0]
    assert not end["isError"], end
    made = end["output"]
    assert made["width"] == 1024 and made["height"] == 1024 and made["size"] > 0
    original = fetch_image(tools_server, made["url"])
    assert original.size == (1024, 1024)
    # The model saw what it made.
    result = [b for m in fake_anthropic.last_main.body["messages"] for b in m["content"]
              if isinstance(b, dict) and b.get("type") == "tool_result"][-1]
    assert any(b["type"] == "image" for b in result["content"]) and made["imageId"] in str(result["content"])

    edit = {"image_id": made["imageId"], "instructions": "add a red boat",
            "mask_region": {"x": 0.0, "y": 0.0, "width": 0.5, "height": 0.5}}
    fake_anthropic.enqueue(Reply([ToolUse("edit_image", edit)]), Reply("Added a boat."))
    frames = await turn(ws, "Add a red boat in the top left")
    edited_end = tool_ends(frames)[0]
    assert not edited_end["isError"], edited_end
    edited = fetch_image(tools_server, edited_end["output"]["url"]).convert("RGB")
    before = original.convert("RGB")
    assert edited.size == before.size
    assert edited.getpixel((100, 100)) != before.getpixel((100, 100))  # inside the mask: changed
    assert edited.getpixel((900, 900)) == before.getpixel((900, 900))  # outside: kept
    sent = fake_images.requests[-1]
    assert sent.path.endswith("/images/edits") and "mask" in sent.files
    assert text_of(frames) == "Added a boat."
    await ws.close()


def inside(polygon: list[tuple[float, float]], x: float, y: float) -> bool:
    """Even-odd rule, written out here so the test does not trust the code it checks."""
    hit = False
    for (x1, y1), (x2, y2) in zip(polygon, polygon[1:] + polygon[:1]):
        if (y1 > y) != (y2 > y) and x < x1 + (y - y1) * (x2 - x1) / (y2 - y1):
            hit = not hit
    return hit


def near_edge(polygon: list[tuple[float, float]], x: float, y: float, margin: float = 1.5) -> bool:
    for (x1, y1), (x2, y2) in zip(polygon, polygon[1:] + polygon[:1]):
        dx, dy = x2 - x1, y2 - y1
        t = max(0.0, min(1.0, ((x - x1) * dx + (y - y1) * dy) / (dx * dx + dy * dy)))
        if (x - x1 - t * dx) ** 2 + (y - y1 - t * dy) ** 2 <= margin * margin:
            return True
    return False


async def test_edit_with_a_polygon_mask_changes_only_its_inside(tools_server, fake_anthropic, fake_images):
    ws, _ = await connect(tools_server)
    fake_anthropic.enqueue(Reply([ToolUse("generate_image", {"prompt": "a wide meadow", "size": "1024x1024"})]),
                           Reply("A meadow."))
    made = tool_ends(await turn(ws, "Paint a meadow"))[0]["output"]
    original = fetch_image(tools_server, made["url"]).convert("RGB")
    polygon = [(100.0, 80.0), (700.0, 150.0), (520.0, 900.0), (180.5, 610.25)]  # a skewed quadrilateral
    edit = {"image_id": made["imageId"], "instructions": "a pond",
            "mask_polygon": [{"x": x, "y": y} for x, y in polygon]}
    fake_anthropic.enqueue(Reply([ToolUse("edit_image", edit)]), Reply("Added a pond."))
    frames = await turn(ws, "Add a pond there")
    end = tool_ends(frames)[0]
    assert not end["isError"], end
    sent = fake_images.requests[-1]
    mask = Image.open(io.BytesIO(sent.files["mask"][0].data))
    assert mask.format == "PNG" and mask.mode == "RGBA" and mask.size == (1024, 1024)
    alpha = mask.getchannel("A")
    assert alpha.getextrema() == (0, 255) and alpha.histogram()[1:255] == [0] * 254  # nothing half-editable
    edited = fetch_image(tools_server, end["output"]["url"]).convert("RGB")
    checked = {True: 0, False: 0}
    for py in range(0, 1024, 7):
        for px in range(0, 1024, 7):
            cx, cy = px + 0.5, py + 0.5  # the pixel's centre
            if near_edge(polygon, cx, cy):
                continue
            within = inside(polygon, cx, cy)
            checked[within] += 1
            assert (alpha.getpixel((px, py)) == 0) == within, (px, py)  # editable only inside
            if not within:
                assert edited.getpixel((px, py)) == original.getpixel((px, py)), (px, py)  # outside: unchanged
    assert checked[True] > 1000 and checked[False] > 1000
    assert "4-point polygon" in str(fake_anthropic.last_main.body["messages"])

    # A point outside the image is refused to the model with the reason; nothing is sent.
    requests = len(fake_images.requests)
    bad = {**edit, "mask_polygon": [{"x": 0, "y": 0}, {"x": 2000, "y": 10}, {"x": 10, "y": 500}]}
    fake_anthropic.enqueue(Reply([ToolUse("edit_image", bad)]), Reply("That was off the image."))
    end = tool_ends(await turn(ws, "Again, bigger"))[0]
    assert end["isError"] and "outside the 1024×1024 image" in str(end["output"])
    assert len(fake_images.requests) == requests
    await ws.close()


async def test_image_api_failure_is_a_tool_error(tools_server, fake_anthropic, fake_images):
    ws, _ = await connect(tools_server)
    fake_images.fail_next(429)
    fake_anthropic.enqueue(Reply([ToolUse("generate_image", {"prompt": "a cat"})]), Reply("The image API is busy."))
    frames = await turn(ws, "Draw a cat")
    end = tool_ends(frames)[0]
    assert end["isError"] and "429" in str(end["output"])
    assert frames[-1]["stopReason"] == "end_turn"
    await ws.close()


def png_b64(image: Image.Image) -> str:
    out = io.BytesIO()
    image.save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


CODE = """
import glob
from PIL import Image
[path] = glob.glob('/mnt/data/*.png')
image = Image.open(path)
print('input', image.size)
image.convert('L').rotate(90, expand=True).save('/mnt/data/gray.png')
"""


async def test_code_runs_on_an_attached_image_and_returns_a_new_one(tools_server, fake_anthropic):
    ws, session = await connect(tools_server)
    if not {t["name"]: t for t in session["tools"]}["code_interpreter"]["enabled"]:
        reason = {t["name"]: t for t in session["tools"]}["code_interpreter"]["reason"]
        if os.environ.get("CHAT_AGENT_REQUIRE_SERVICES") == "1":
            pytest.fail(f"code_interpreter is not offered: {reason}")
        pytest.skip(f"code_interpreter is not offered here: {reason}")
    source = Image.new("RGB", (120, 80), (250, 10, 10))
    fake_anthropic.enqueue(Reply([ToolUse("code_interpreter", {"code": CODE})]), Reply("Rotated and grayscale."))
    frames = await turn(ws, "Make it gray and rotate it",
                        attachments=[{"type": "image", "data": png_b64(source), "mediaType": "image/png"}])
    end = tool_ends(frames)[0]
    assert not end["isError"], end
    output = end["output"]
    assert output["exitCode"] == 0 and "input (120, 80)" in output["stdout"]
    [made] = output["files"]
    result = fetch_image(tools_server, made["url"])
    assert result.size == (80, 120) and result.mode == "L"
    assert [f["status"] for f in frames if f["type"] == "tool_progress"]  # progress reached the client
    tool_result = [b for m in fake_anthropic.last_main.body["messages"] for b in m["content"]
                   if isinstance(b, dict) and b.get("type") == "tool_result"][-1]
    assert any(b["type"] == "image" for b in tool_result["content"])  # the model sees the new image
    await ws.close()


def system_starts(body: dict, prefix: str) -> bool:
    system = body.get("system")
    text = system if isinstance(system, str) else "".join(b.get("text", "") for b in system or [])
    return text.startswith(prefix)


async def test_deep_research_with_progress(tools_server, fake_anthropic, fake_exa):
    ws, session = await connect(tools_server)
    fake_anthropic.enqueue(Reply('{"queries": ["tidal energy costs 2025", "tidal energy capacity by country"]}'),
                           when=lambda body: system_starts(body, "You plan web research"))
    fake_anthropic.enqueue(Reply("Tidal power costs fell [1] while capacity grew in France [2]."),
                           when=lambda body: system_starts(body, "You write research reports"))
    fake_anthropic.enqueue(Reply([ToolUse("deep_research", {"question": "How is tidal energy doing?"})]),
                           Reply("In short: cheaper [1], and growing [2]."))
    searches_before = len(fake_exa.requests)
    frames = await turn(ws, "Research tidal energy for me", settings={"enableDeepResearch": True})
    end = tool_ends(frames)[0]
    assert not end["isError"], end
    statuses = [f["status"] for f in frames if f["type"] == "tool_progress" and f["toolId"] == end["toolId"]]
    stages = ["Planning", "Searching", "Reading", "Writing"]
    firsts = [next(i for i, s in enumerate(statuses) if s.startswith(stage)) for stage in stages]
    assert firsts == sorted(firsts), statuses
    report = end["output"]
    assert report["searches"] == 2 and len(fake_exa.requests) - searches_before == 2
    assert "[1]" in report["report"] and "[2]" in report["report"]
    assert [s["n"] for s in report["sources"]] == [1, 2]
    for source in report["sources"]:
        assert source["url"].startswith("https://") and source["url"] in report["report"]
    assert text_of(frames) == "In short: cheaper [1], and growing [2]."
    await ws.close()


async def test_deep_research_is_offered_only_when_asked(tools_server, fake_anthropic):
    ws, _ = await connect(tools_server)
    fake_anthropic.enqueue(Reply("plain answer"))
    await turn(ws, "What is tidal energy?")
    assert "deep_research" not in [t["name"] for t in fake_anthropic.last_main.body["tools"]]
    fake_anthropic.enqueue(Reply("researched answer"))
    await turn(ws, "And in depth?", settings={"enableDeepResearch": True})
    assert "deep_research" in [t["name"] for t in fake_anthropic.last_main.body["tools"]]
    await ws.close()
