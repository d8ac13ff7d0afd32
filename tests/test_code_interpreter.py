"""code_interpreter through a real ToolRegistry, on a real ConversationFiles, in real bubblewrap.

Tests that run code are skipped only where `probe()` says bubblewrap cannot work on this
machine; under CI (CHAT_AGENT_REQUIRE_SERVICES=1) they run, and fail, instead.
"""

from __future__ import annotations

import asyncio
import base64
import io
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from chat_agent.config import Settings
from chat_agent.files.catalog import ConversationFiles, open_files
from tools.sandbox.runner import probe
from chat_agent.store import CreateConversation
from chat_agent.tooling import ToolRegistry, ToolResult, ToolServices, ToolUnavailable
from tests import pace
from tests.cancelling import cancel_within
from tests.processes import cmdline, holder, killed, ours, poll, sigkill_all, wait_for_tree
from tools import code_interpreter

REASON = probe()
REQUIRED = bool(os.environ.get("CHAT_AGENT_REQUIRE_SERVICES"))
needs_sandbox = pytest.mark.skipif(REASON is not None and not REQUIRED, reason=f"no sandbox here: {REASON}")
SECRET = "s3cret-c0de-7e41"
TIMEOUT = 2.0  # the code's wall-clock limit in these tests


def png(size: tuple[int, int] = (64, 48), color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


@pytest.fixture
async def files(tmp_path: Path, db) -> AsyncIterator[ConversationFiles]:
    """A conversation's files, stored under tmp_path/data, as a turn lends them to its tools."""
    store, writer = db
    await writer.wait_for(writer.submit([CreateConversation("u", "c", time.time())]))
    app_files = open_files(settings_for(tmp_path), store, writer)
    yield app_files.scoped("u", "c")
    await app_files.close()


def settings_for(tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"data_dir": tmp_path / "data", "code_timeout": TIMEOUT, "code_memory_mb": 256}
    return Settings(**{**values, **overrides})


def registry_for(settings: Settings, **build: Any) -> ToolRegistry:
    tool = code_interpreter.build(settings, **build)
    registry = ToolRegistry(heartbeat=60)
    registry.add(tool, timeout=tool.metadata["timeout"])
    return registry


async def run(registry: ToolRegistry, files: ConversationFiles, code: str, statuses: list[str] | None = None,
              **tool_input: Any) -> ToolResult:
    sink = statuses if statuses is not None else []
    return await registry.run(
        "toolu_code", "code_interpreter", {"code": code, **tool_input}, conversation_id=files.conversation_id,
        owner=files.owner, on_progress=lambda _id, _elapsed, status: sink.append(status), services=ToolServices(files=files),
    )


def text_of(result: ToolResult) -> str:
    return "\n".join(b["text"] for b in result.content if b["type"] == "text")


@needs_sandbox
async def test_code_turns_an_input_image_into_a_stored_one(tmp_path: Path, files: ConversationFiles) -> None:
    photo = await files.save(png(), "photo.png", source="upload")
    code = f"""
from PIL import Image
image = Image.open("/mnt/data/{photo.id}.png")
print("input", image.size)
image.convert("L").resize((32, 24)).save("/mnt/data/gray.png")
"""
    statuses: list[str] = []
    result = await run(registry_for(settings_for(tmp_path)), files, code, statuses)
    assert not result.is_error, result.content
    assert statuses == ["Preparing files", "Running code", "Storing 1 image"]
    [made] = result.output["files"]
    stored, data = await files.read(made["imageId"])
    assert (stored.source, stored.filename, stored.media_type) == ("code", "gray.png", "image/png")
    assert made == {"imageId": stored.id, "url": files.url(stored), "name": "gray.png", "width": 32, "height": 24,
                    "size": len(data), "mediaType": "image/png"}
    assert [i.id for i in await files.images()] == [photo.id, stored.id]
    assert Image.open(io.BytesIO(data)).convert("L").size == (32, 24)
    assert result.output["stdout"] == "input (64, 48)\n" and result.output["exitCode"] == 0
    summary, label, block = result.content
    assert "Exit code 0." in summary["text"] and "input (64, 48)" in summary["text"]
    assert label == {"type": "text", "text": f"[image {stored.id}: gray.png, 32×24]"}
    assert block["type"] == "image" and block["source"]["media_type"] == "image/png"
    assert base64.b64decode(block["source"]["data"]) == data  # small enough to go to the model as it is


@needs_sandbox
async def test_big_output_images_reach_the_model_scaled_down(tmp_path: Path, files: ConversationFiles) -> None:
    code = "from PIL import Image\nImage.new('RGB', (3000, 1500), 'blue').save('big.png')"
    result = await run(registry_for(settings_for(tmp_path)), files, code)
    [made] = result.output["files"]
    assert (made["width"], made["height"]) == (3000, 1500)  # stored as written
    shown = Image.open(io.BytesIO(base64.b64decode(result.content[-1]["source"]["data"])))
    assert shown.size == (1568, 784)


@needs_sandbox
async def test_output_text_and_other_files(tmp_path: Path, files: ConversationFiles) -> None:
    code = """
import sys
print("to stdout")
print("to stderr", file=sys.stderr)
open("table.csv", "w").write("a,b\\n1,2\\n")
open("blob.bin", "wb").write(bytes(1234))
open("fake.png", "w").write("not really a picture, just text " * 10)
open("big.txt", "w").write("x" * 30_000)
"""
    result = await run(registry_for(settings_for(tmp_path)), files, code)
    assert not result.is_error
    assert (result.output["stdout"], result.output["stderr"]) == ("to stdout\n", "to stderr\n")
    assert result.output["files"] == []
    text = text_of(result)
    assert "--- stdout ---\nto stdout" in text and "--- stderr ---\nto stderr" in text
    assert "--- file table.csv ---\na,b\n1,2" in text
    assert "Other files written (not kept): big.txt (30,000 bytes), blob.bin (1,234 bytes)" in text
    assert "Note: fake.png: not kept (The file is text, not an image.)" in text
    assert await files.images() == []


@needs_sandbox
async def test_an_exception_is_a_normal_result_with_its_traceback(tmp_path: Path, files: ConversationFiles) -> None:
    result = await run(registry_for(settings_for(tmp_path)), files, "print('before')\n1 / 0")
    assert not result.is_error
    assert result.output["exitCode"] == 1 and not result.output["timedOut"]
    assert "Traceback" in result.output["stderr"] and "ZeroDivisionError: division by zero" in result.output["stderr"]
    text = text_of(result)
    assert text.startswith("Exit code 1: the code failed (see stderr).") and "ZeroDivisionError" in text


@needs_sandbox
async def test_inputs_default_to_the_newest_ten_images(tmp_path: Path, files: ConversationFiles) -> None:
    saved = [await files.save(png(color=(i, i, i)), f"p{i}.png", source="upload") for i in range(12)]
    registry = registry_for(settings_for(tmp_path))
    listing = "import os\nprint(sorted(n for n in os.listdir('/mnt/data') if not n.startswith('.')))"
    default = await run(registry, files, listing)
    assert default.output["stdout"] == f"{sorted(f'{s.id}.png' for s in saved[-10:])}\n"
    chosen = await run(registry, files, listing, image_ids=[saved[0].id, saved[0].id])
    assert chosen.output["stdout"] == f"['{saved[0].id}.png']\n"
    none = await run(registry, files, listing, image_ids=[])
    assert none.output["stdout"] == "[]\n"


@needs_sandbox
async def test_an_unknown_image_id_is_an_error(tmp_path: Path, files: ConversationFiles) -> None:
    photo = await files.save(png(), "photo.png", source="upload")
    result = await run(registry_for(settings_for(tmp_path)), files, "pass", image_ids=["file_nope"])
    assert result.is_error
    assert result.content == f"LookupError: Not an image of this conversation: file_nope. Its images: {photo.id} (photo.png)"


@needs_sandbox
async def test_the_servers_environment_is_out_of_reach(tmp_path: Path, files: ConversationFiles,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAT_AGENT_TEST_SECRET", SECRET)
    result = await run(registry_for(settings_for(tmp_path)), files, "import os\nprint(dict(os.environ))")
    assert result.output["exitCode"] == 0, result.output["stderr"]
    assert "PATH" in result.output["stdout"] and SECRET not in result.output["stdout"]
    assert "CHAT_AGENT_TEST_SECRET" not in result.output["stdout"]


@needs_sandbox
async def test_the_data_dir_is_out_of_reach(tmp_path: Path, files: ConversationFiles) -> None:
    await files.save(png(), "photo.png", source="upload")
    data_dir = tmp_path / "data"
    stored = [p for p in data_dir.rglob("*") if p.is_file()]
    assert stored, "the files service wrote nothing under the data dir"
    targets = [str(data_dir), *map(str, stored), str(tmp_path / "db.sqlite")]
    code = f"""
import os
for path in {targets!r}:
    try:
        print(path, "READ", os.listdir(path) if os.path.isdir(path) else len(open(path, "rb").read()))
    except OSError as exc:
        print(path, "DENIED", type(exc).__name__)
"""
    result = await run(registry_for(settings_for(tmp_path)), files, code)
    assert result.output["stdout"].count("DENIED") == len(targets), result.output


@needs_sandbox
async def test_no_socket_even_to_the_loopback(tmp_path: Path, files: ConversationFiles) -> None:
    connected = asyncio.Event()
    server = await asyncio.start_server(lambda r, w: connected.set(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    code = f"""
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2)
    print("CONNECTED")
except OSError as exc:
    print("FAILED", exc)
"""
    async with server:
        result = await run(registry_for(settings_for(tmp_path)), files, code)
        await asyncio.sleep(0.1)
    assert result.output["stdout"].startswith("FAILED"), result.output
    assert not connected.is_set()


@needs_sandbox
async def test_an_endless_loop_is_killed_at_the_time_limit(tmp_path: Path, files: ConversationFiles) -> None:
    before = ours()
    started = time.monotonic()
    result = await run(registry_for(settings_for(tmp_path)), files, "print('start')\nwhile True: pass")
    assert TIMEOUT <= time.monotonic() - started < TIMEOUT + pace.scaled(1.5)
    assert not result.is_error
    assert result.output["timedOut"] and result.output["exitCode"] is None
    assert result.output["stdout"] == "start\n"
    assert text_of(result).startswith(f"Timed out: the code ran past the {TIMEOUT:g} s time limit and was killed.")
    assert ours() == before


@needs_sandbox
async def test_a_fork_bomb_is_contained(tmp_path: Path, files: ConversationFiles) -> None:
    before = ours()
    started = time.monotonic()
    bomb = "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass"
    result = await run(registry_for(settings_for(tmp_path)), files, bomb)
    assert time.monotonic() - started < TIMEOUT + pace.scaled(2)
    assert result.output["timedOut"] and not result.is_error
    assert ours() == before


@needs_sandbox
async def test_a_memory_hog_fails_inside(tmp_path: Path, files: ConversationFiles) -> None:
    code = "blob = bytearray(1024 * 1024 * 1024)\nprint('allocated')"
    result = await run(registry_for(settings_for(tmp_path, code_memory_mb=256)), files, code)
    assert not result.is_error and result.output["exitCode"] == 1
    assert "MemoryError" in result.output["stderr"] and "allocated" not in result.output["stdout"]


@needs_sandbox
async def test_abort_kills_the_code_at_once(tmp_path: Path, files: ConversationFiles) -> None:
    before = ours()
    registry = registry_for(settings_for(tmp_path, code_timeout=60))
    code = "import subprocess\nfor _ in range(2): subprocess.Popen(['sleep', '600'])\nwhile True: pass"
    task = asyncio.create_task(run(registry, files, code))
    tree = await wait_for_tree(lambda pids: sum(cmdline(p).startswith("sleep") for p in pids) == 2)
    assert len([pid for pid in tree if pid not in before]) >= 4  # bwrap, its PID 1, python, 2 sleeps
    await cancel_within(task, 1.0)
    assert ours() == before


def test_missing_bubblewrap_means_not_offered(tmp_path: Path) -> None:
    with pytest.raises(ToolUnavailable) as caught:
        code_interpreter.build(settings_for(tmp_path), bwrap="/nonexistent/bwrap")
    reason = str(caught.value)
    assert reason.startswith("code sandbox unavailable: not installed: /nonexistent/bwrap")
    assert reason.endswith("set CHAT_AGENT_CODE_UNSANDBOXED=1 to run code without a sandbox (dangerous)")


async def test_unsandboxed_runs_after_a_loud_warning(tmp_path: Path, files: ConversationFiles,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tools.code_interpreter"):
        registry = registry_for(settings_for(tmp_path, code_unsandboxed=True), bwrap="/nonexistent/bwrap")
    [warning] = [r for r in caplog.records if r.name == "tools.code_interpreter"]
    message = warning.getMessage()
    assert warning.levelno == logging.WARNING and message.count("\n") >= 5
    assert "WITHOUT A SANDBOX" in message and "with this server's privileges" in message
    photo = await files.save(png(), "photo.png", source="upload")
    code = "import os\nprint([n for n in os.listdir('.') if not n.startswith('.')], os.getcwd() == '/mnt/data')"
    result = await run(registry, files, code)
    assert result.output["stdout"] == f"['{photo.id}.png'] False\n", result.output


@needs_sandbox
def test_schema_and_timeout(tmp_path: Path) -> None:
    tool = code_interpreter.build(settings_for(tmp_path, code_timeout=45))
    assert tool.metadata == {"timeout": 75}
    registry = ToolRegistry()
    registry.add(tool)
    [schema] = registry.schemas()
    assert schema["name"] == "code_interpreter" and list(schema["input_schema"]["properties"]) == ["code", "image_ids"]
    assert schema["input_schema"]["required"] == ["code"]
    description = schema["description"]
    assert "Pillow" in description and "no network" in description and "/mnt/data/file_ab12….png" in description
    unsandboxed = code_interpreter.build(settings_for(tmp_path, code_unsandboxed=True)).description
    assert "no network" not in unsandboxed and "/mnt/data" not in unsandboxed


@needs_sandbox
async def test_runs_go_under_the_data_dir_which_start_up_cleans(tmp_path: Path, files: ConversationFiles) -> None:
    scratch = tmp_path / "data" / "sandbox"
    live, live_dir = holder(scratch)  # another server sharing this data dir, mid-run
    dead, dead_dir = holder(scratch)
    try:
        killed(dead)  # a server killed mid-run left its dir
        registry = registry_for(settings_for(tmp_path))  # building the tool is part of start-up
        assert sorted(p.name for p in scratch.iterdir()) == [live_dir.name]
        code = "import os\nprint(os.getcwd(), sorted(os.listdir('.')))"
        task = asyncio.create_task(run(registry, files, code + "\nimport time; time.sleep(60)"))
        assert await asyncio.to_thread(poll, lambda: len(list(scratch.iterdir())) == 2, 10)
        [mine] = [p for p in scratch.iterdir() if p != live_dir]  # this run's dir, under the data dir
        assert (mine / ".main.py").read_text().startswith(code)
        await cancel_within(task, 1.0)
        assert [p.name for p in scratch.iterdir()] == [live_dir.name]
    finally:
        sigkill_all([p.pid for p in (live, dead) if p.is_alive()])
