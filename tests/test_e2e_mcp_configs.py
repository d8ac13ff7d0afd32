"""An MCP configuration copied from other clients, with the real server and the real demo MCP
servers: VS Code's `{"servers": ...}` shape, Cline's `disabled`, `timeout` and `autoApprove`,
Roo Code's `alwaysAllow`, Claude Code's milliseconds; and images a server sends that Pillow
alone would refuse (a damaged ancillary chunk) or that are no image at all."""

from __future__ import annotations

import base64
import io
import json
import sys

import pytest
from PIL import Image

from tests.conftest import server_env
from tests.fakes.anthropic_fake import Reply, ToolUse
from tests.mcp_servers import DEMO, HttpDemo
from tests.support import ServerProcess, connect, send, until


@pytest.fixture(scope="module")
def copied(tmp_path_factory, fake_anthropic, fake_exa):
    where = tmp_path_factory.mktemp("mcp-copied")
    web = HttpDemo(where / "web.jsonl").start()
    config = {"inputs": [], "servers": {
        "demo": {"type": "stdio", "command": sys.executable, "args": [str(DEMO), "stdio"], "timeout": 1,
                 "disabled": False, "autoApprove": ["echo"]},
        "web": {"type": "http", "url": web.url, "timeout": 30000, "alwaysAllow": []},
        "off": {"command": str(where / "no-such-server"), "disabled": True},
    }}
    (where / "mcp.json").write_text(json.dumps(config))
    server = ServerProcess(where / "data", server_env(fake_anthropic, fake_exa,
                                                      CHAT_AGENT_MCP_CONFIG=str(where / "mcp.json"),
                                                      CHAT_AGENT_LOG_LEVEL="INFO")).start(timeout=60)
    yield server
    server.stop()
    web.kill()


async def test_the_copied_file_runs_its_servers_as_it_says(copied, fake_anthropic):
    ws, session = await connect(copied)
    names = {t["name"]: t for t in session["tools"]}
    assert names["demo__echo"]["enabled"] and names["web__echo"]["enabled"]
    assert not [n for n in names if n.startswith("off")]  # disabled: not started, not listed
    log = copied.log()
    assert "server 'demo': autoApprove is ignored" in log and "server 'web': alwaysAllow is ignored" in log
    assert "'off' is disabled there" in log and "each tool call may take 30 s (timeout 30000)" in log

    # `timeout: 1` bounds the stdio server's calls; the HTTP one's 30 s lets the same call finish.
    fake_anthropic.enqueue(Reply([ToolUse("demo__slow", {"seconds": 2}, id="toolu_d"),
                                  ToolUse("web__slow", {"seconds": 2}, id="toolu_w")]), Reply("Done."))
    await send(ws, type="message", content="Wait on both")
    frames = await until(ws, "done", timeout=60)
    ends = {f["toolId"]: f for f in frames if f["type"] == "tool_end"}
    assert ends["toolu_d"]["isError"] and "timed out after 1 s" in ends["toolu_d"]["output"]
    assert not ends["toolu_w"]["isError"] and ends["toolu_w"]["output"] == "waited 2.0 s"
    await ws.close()


async def test_a_damaged_png_passes_and_a_non_image_says_what_it_is(copied, fake_anthropic):
    ws, _ = await connect(copied)
    fake_anthropic.enqueue(Reply([ToolUse("web__damaged_picture", {}, id="toolu_png"),
                                  ToolUse("web__not_a_picture", {}, id="toolu_html")]), Reply("Seen."))
    await send(ws, type="message", content="Show me")
    frames = await until(ws, "done", timeout=60)
    ends = {f["toolId"]: f for f in frames if f["type"] == "tool_end"}
    caption, picture = ends["toolu_png"]["output"]
    assert caption["text"] == "a damaged square" and picture["mediaType"] == "image/png" and picture["url"]
    assert "The file is an HTML page, not an image" in json.dumps(ends["toolu_html"]["output"])
    results = {b["tool_use_id"]: b for m in fake_anthropic.main_bodies[-1]["messages"]
               if isinstance(m["content"], list) for b in m["content"] if b.get("type") == "tool_result"}
    image = next(b for b in results["toolu_png"]["content"] if b["type"] == "image")
    assert Image.open(io.BytesIO(base64.b64decode(image["source"]["data"]))).convert("RGB").getpixel((0, 0)) \
        == (0, 128, 0)
    await ws.close()
