"""MCP servers and configured tools from a real client: `python server.py` with
CHAT_AGENT_MCP_CONFIG naming a real stdio MCP server, a real streamable-HTTP one on loopback
and one that cannot start, CHAT_AGENT_TOOLS naming LangChain tools, and a tool package found
through its entry point; the fake Anthropic model calls them all."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from tests import pace
from tests.conftest import server_env
from tests.fakes.anthropic_fake import Reply, ToolUse
from tests.mcp_servers import DEMO, HttpDemo
from tests.support import ServerProcess, connect, polled, send, text_of, until

HERE = Path(__file__).parent
MODULE = "tests.tool_plugins.configured"


def events(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


@pytest.fixture(scope="module")
def mcp_setup(tmp_path_factory, fake_anthropic, fake_exa):
    where = tmp_path_factory.mktemp("mcp")
    with HttpDemo(where / "web.jsonl") as web:
        config = {"mcpServers": {
            "demo": {"command": sys.executable, "args": [str(DEMO), "stdio"],
                     "env": {"DEMO_MCP_RECORD": str(where / "demo.jsonl")}},
            "web": {"url": web.url, "headers": {"Authorization": "Bearer ${DEMO_TOKEN}"}},
            "broken": {"command": str(where / "no-such-server")},
        }}
        (where / "mcp.json").write_text(json.dumps(config))
        env = server_env(fake_anthropic, fake_exa, CHAT_AGENT_MCP_CONFIG=str(where / "mcp.json"),
                         DEMO_TOKEN="t0ken", CHAT_AGENT_TOOLS=f"{MODULE}:both,{MODULE}:adder,{MODULE}:needs_a_key",
                         PYTHONPATH=os.pathsep.join([str(HERE / "tool_plugins"), os.environ.get("PYTHONPATH", "")]))
        with ServerProcess(where / "data", env) as server:
            yield server, web, where


async def turn(ws, content: str) -> list[dict]:
    await send(ws, type="message", content=content)
    return await until(ws, "done", timeout=60)


def by_name(session: dict) -> dict[str, dict]:
    return {t["name"]: t for t in session["tools"]}


def tool_results(body: dict) -> dict[str, dict]:
    return {b["tool_use_id"]: b for m in body["messages"] if isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_result"}


async def test_tools_listed_called_with_progress_and_images(mcp_setup, fake_anthropic):
    server, web, where = mcp_setup
    ws, session = await connect(server)
    tools = by_name(session)
    for name in ("demo__echo", "demo__count", "demo__slow", "demo__picture", "web__count", "web__picture",
                 "shout", "nap", "adder", "reverse"):
        assert tools[name]["enabled"], tools[name]
    assert not tools["broken__*"]["enabled"] and "no-such-server" in tools["broken__*"]["reason"]
    assert tools["needs_a_key"] == {"name": "needs_a_key", "enabled": False, "reason": "WEATHER_API_KEY is not set"}

    calls = [ToolUse("demo__count", {"to": 3}, id="toolu_count"), ToolUse("web__picture", {"color": "blue"}, id="toolu_pic"),
             ToolUse("shout", {"text": "hi"}, id="toolu_shout"), ToolUse("reverse", {"text": "abc"}, id="toolu_rev")]
    fake_anthropic.enqueue(Reply(calls), Reply("All done."))
    frames = await turn(ws, "Use the tools")
    assert frames[-1]["stopReason"] == "end_turn" and text_of(frames) == "All done."
    ends = {f["toolId"]: f for f in frames if f["type"] == "tool_end"}
    assert {f["toolId"] for f in frames if f["type"] == "tool_start"} == set(ends)
    assert not any(e["isError"] for e in ends.values()), ends
    statuses = [f["status"] for f in frames if f["type"] == "tool_progress" and f["toolId"] == "toolu_count"]
    assert [s for s in statuses if s.startswith("counted")] == ["counted 1 of 3", "counted 2 of 3", "counted 3 of 3"]
    assert ends["toolu_count"]["output"] == "counted to 3"
    assert ends["toolu_shout"]["output"] == "HI" and ends["toolu_rev"]["output"] == "cba"
    caption, picture = ends["toolu_pic"]["output"]
    assert caption == {"type": "text", "text": "a blue square"}
    assert picture["type"] == "image" and picture["mediaType"] == "image/png" and picture["url"]

    # What the model was offered and sent back: the down server's tools are not offered; the
    # image reached it as an image block.
    first, second = fake_anthropic.main_bodies[-2:]
    offered = {t["name"]: t for t in first["tools"]}
    assert offered["demo__count"]["input_schema"] == {"type": "object", "properties": {"to": {"type": "integer"}},
                                                       "required": ["to"]}
    assert offered["demo__count"]["description"].startswith("Count up to")
    assert not any(name.startswith("broken") for name in offered) and "needs_a_key" not in offered
    results = tool_results(second)
    image = next(b for b in results["toolu_pic"]["content"] if b["type"] == "image")
    pixels = Image.open(io.BytesIO(base64.b64decode(image["source"]["data"]))).convert("RGB")
    assert pixels.getpixel((0, 0)) == (0, 0, 255)
    assert results["toolu_count"]["content"] == [{"type": "text", "text": "counted to 3"}]
    await ws.close()


async def test_abort_cancels_mcp_calls_on_the_servers_and_a_sync_tool(mcp_setup, fake_anthropic):
    server, web, where = mcp_setup
    ws, _ = await connect(server)
    calls = [ToolUse("demo__slow", {"seconds": 30}, id="toolu_a"), ToolUse("web__slow", {"seconds": 30}, id="toolu_b"),
             ToolUse("nap", {"seconds": 3}, id="toolu_c")]
    def slow_started(name: str) -> int:
        return sum(e["event"] == "slow_started" for e in events(where / f"{name}.jsonl"))

    before = {name: slow_started(name) for name in ("demo", "web")}
    fake_anthropic.enqueue(Reply(calls))
    await send(ws, type="message", content="Take your time")
    await polled(lambda: all(slow_started(name) > before[name] for name in before), timeout=15)
    started = time.monotonic()
    await send(ws, type="abort")
    frames = await until(ws, "done", timeout=10)
    assert time.monotonic() - started < pace.scaled(1.5)
    assert frames[-1]["stopReason"] == "aborted"
    ends = {f["toolId"]: f for f in frames if f["type"] == "tool_end"}
    assert set(ends) == {"toolu_a", "toolu_b", "toolu_c"} and all(e["isError"] for e in ends.values())
    for name in ("demo", "web"):  # the MCP cancellation reached each server, which stopped the work
        await polled(lambda: events(where / f"{name}.jsonl")[-1]["event"] == "slow_cancelled", timeout=10)
    # The history is whole: the next turn works and the model saw the cancelled results.
    fake_anthropic.enqueue(Reply([ToolUse("demo__echo", {"text": "still here"}, id="toolu_e")]), Reply("Fine."))
    frames = await turn(ws, "Again")
    assert [f["output"] for f in frames if f["type"] == "tool_end"] == ["echo: still here"]
    await ws.close()


async def test_servers_that_die_come_back_and_session_tools_says_why(mcp_setup, fake_anthropic):
    server, web, where = mcp_setup
    ws, _ = await connect(server)
    # A stdio server that crashes mid-call: the call fails clearly, the next use finds it restarted.
    pids = {e["pid"] for e in events(where / "demo.jsonl") if e["event"] == "started"}
    fake_anthropic.enqueue(Reply([ToolUse("demo__crash", {}, id="toolu_crash")]), Reply("It crashed."))
    frames = await turn(ws, "Crash it")
    [end] = [f for f in frames if f["type"] == "tool_end"]
    assert end["isError"] and "closed the connection" in end["output"]
    fake_anthropic.enqueue(Reply([ToolUse("demo__echo", {"text": "back"}, id="toolu_back")]), Reply("Back."))
    frames = await turn(ws, "Is it back?")
    [end] = [f for f in frames if f["type"] == "tool_end"]
    assert not end["isError"] and end["output"] == "echo: back", end
    assert len({e["pid"] for e in events(where / "demo.jsonl") if e["event"] == "started"} - pids) == 1

    # The HTTP server killed: the next call fails, session.tools says why, the turn goes on.
    web.kill()
    fake_anthropic.enqueue(Reply([ToolUse("web__echo", {"text": "hello"}, id="toolu_web")]), Reply("The server is down."))
    frames = await turn(ws, "Call the web server")
    [end] = [f for f in frames if f["type"] == "tool_end"]
    assert end["isError"] and "MCP server web" in end["output"]
    assert frames[-1]["stopReason"] == "end_turn"

    async def web_echo() -> dict:
        _, session = await connect(server)
        return by_name(session)["web__echo"]

    down = None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (down := await web_echo())["enabled"]:
        await asyncio.sleep(0.2)
    assert down is not None and not down["enabled"] and "MCP server web is down" in down["reason"], down
    fake_anthropic.enqueue(Reply("Answered without it."))
    frames = await turn(ws, "Anything else?")
    assert frames[-1]["stopReason"] == "end_turn"
    assert "web__echo" not in [t["name"] for t in fake_anthropic.last_main.body["tools"]]

    web.start()  # same port: the retries find it, and its tools are offered again
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (await web_echo())["enabled"]:
        await asyncio.sleep(0.2)
    assert (await web_echo())["enabled"]
    fake_anthropic.enqueue(Reply([ToolUse("web__echo", {"text": "again"}, id="toolu_again")]), Reply("Up again."))
    frames = await turn(ws, "And now?")
    assert [f["output"] for f in frames if f["type"] == "tool_end"] == ["echo: again"]
    await ws.close()
