"""Tools by configuration (CHAT_AGENT_TOOLS, the `chat_agent.tools` entry points) and the MCP
config file, composed as server.py does it: real LangChain tools run through the registry."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path

import pytest

import tools
from chat_agent.config import ConfigError, Settings
from chat_agent.tooling import ToolRegistry
from chat_agent.tooling.mcp.config import HttpServer, StdioServer, load_config
from tests import pace, reaper

PLUGINS = Path(__file__).parent / "tool_plugins"
MODULE = "tests.tool_plugins.configured"


@pytest.fixture
def entry_point_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny distribution under tests/tool_plugins, on the path as if pip had installed it."""
    monkeypatch.syspath_prepend(str(PLUGINS))


def registry(*entries: str) -> ToolRegistry:
    return tools.build_registry(Settings(tools=tuple(entries), model="claude-test-model"))


async def run(reg: ToolRegistry, name: str, tool_input: dict, progress: list | None = None):
    return await reg.run("toolu_1", name, tool_input, conversation_id="c1", owner="alice",
                         on_progress=lambda *event: (progress if progress is not None else []).append(event))


async def test_every_kind_of_entry_plugs_in_unchanged(entry_point_package):
    reg = registry(f"{MODULE}:adder", f"{MODULE}:both", f"{MODULE}:factory", f"{MODULE}:needs_a_key")
    shown = {a.name: a for a in reg.availability()}
    for name in ("adder", "shout", "nap", "model_name", "reverse"):  # reverse: the entry point
        assert shown[name].enabled, shown[name]
    assert not shown["needs_a_key"].enabled and shown["needs_a_key"].reason == "WEATHER_API_KEY is not set"
    assert "web_search" in shown  # the built-ins are still there, first
    names = [s["name"] for s in reg.schemas()]
    assert names.index("generate_artifact") < names.index("adder")
    assert (await run(reg, "adder", {"a": 2, "b": 3})).content == "5"
    assert (await run(reg, "shout", {"text": "hi"})).content == "HI"
    assert (await run(reg, "model_name", {})).content == "claude-test-model"  # the factory saw the settings
    assert (await run(reg, "reverse", {"text": "abc"})).content == "cba"
    bad = await run(reg, "adder", {"a": "two", "b": 3})
    assert bad.is_error and "a:" in bad.content  # the registry's own validation


async def test_a_sync_tool_runs_off_the_loop_and_abort_returns_at_once():
    reg = registry(f"{MODULE}:both")
    progress: list = []
    call = asyncio.create_task(run(reg, "nap", {"seconds": 1.5}, progress))
    ticks, started = 0, time.monotonic()
    while ticks <= 10 or time.monotonic() - started < 0.3:  # the loop keeps running while the tool sleeps
        await asyncio.sleep(0.01)
        ticks += 1
    assert not call.done()  # ticks counted, not time: a busy machine runs fewer of them in 0.3 s
    assert any(t.name == "tool:nap" for t in threading.enumerate())  # its own thread, not the executor's
    assert [p[2] for p in progress] == ["napping 1.5 s"]
    started = time.monotonic()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert time.monotonic() - started < pace.scaled(0.1)
    finished = await run(reg, "nap", {"seconds": 0.05})
    assert finished.content == "napped 0.05 s" and not finished.is_error


async def test_a_sync_tool_is_bounded_by_the_registry_timeout():
    reg = ToolRegistry(default_timeout=0.2)
    from tests.tool_plugins.configured import nap

    reg.add(nap)
    started = time.monotonic()
    result = await run(reg, "nap", {"seconds": 10})
    assert result.is_error and result.error_type == "timeout" and time.monotonic() - started < 0.2 + pace.scaled(0.3)


@pytest.mark.parametrize(("entry", "says"), [
    (f"{MODULE}:not_a_tool", "expected a LangChain tool (BaseTool), a list of them or a factory taking the "
                             "settings; got int"),
    (f"{MODULE}:web_search", "tool name 'web_search' is already taken by a built-in tool"),
    ("tests.tool_plugins.missing:tool", "cannot load it: ModuleNotFoundError"),
    (f"{MODULE}:nothing_here", "cannot load it: AttributeError"),
    ("no_colon_here", "must look like 'package.module:attribute'"),
])
def test_a_bad_entry_is_one_clear_start_up_error(entry: str, says: str):
    with pytest.raises(ConfigError) as raised:
        registry(entry)
    assert f"CHAT_AGENT_TOOLS entry {entry!r}" in str(raised.value) and says in str(raised.value)


def test_the_same_tool_twice_is_a_clash(entry_point_package):
    with pytest.raises(ConfigError, match="tool name 'shout' is already taken by CHAT_AGENT_TOOLS entry"):
        registry(f"{MODULE}:both", f"{MODULE}:shout")


def test_the_server_refuses_to_start_with_a_bad_entry(tmp_path: Path):

    env = {"PATH": "/usr/bin:/bin", "CHAT_AGENT_DATA_DIR": str(tmp_path), "CHAT_AGENT_PORT": "1",
           "CHAT_AGENT_TOOLS": f"{MODULE}:not_a_tool"}
    done = reaper.run([sys.executable, "server.py"], cwd=Path(__file__).parent.parent, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"chat-agent: CHAT_AGENT_TOOLS entry '{MODULE}:not_a_tool'")


def write(tmp_path: Path, config) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(config) if not isinstance(config, str) else config)
    return path


def test_mcp_config_in_the_common_shape(tmp_path: Path):
    path = write(tmp_path, {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "server"], "env": {"TOKEN": "${MY_TOKEN}"}},
        "search": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${MY_TOKEN}"}},
    }})
    assert load_config(path, {"MY_TOKEN": "s3cret"}) == [
        StdioServer("files", "npx", ("-y", "server"), {"TOKEN": "s3cret"}),
        HttpServer("search", "https://mcp.example.com/mcp", {"Authorization": "Bearer s3cret"})]


@pytest.mark.parametrize(("config", "says"), [
    ("{not json", "not valid JSON"),
    ({"context_servers": {}}, 'expected {"mcpServers": {name: {...}}}'),
    ({"mcpServers": {"a__b": {"command": "x"}}}, "server 'a__b': a name is 1 to 40 letters"),
    ({"mcpServers": {"a": {"command": "x", "url": "http://h"}}}, 'give either "command"'),
    ({"mcpServers": {"a": {"url": "ftp://h"}}}, "url must start with http:// or https://"),
    ({"mcpServers": {"a": {"type": "sse", "url": "http://h/sse"}}}, "SSE transport is not supported"),
    ({"mcpServers": {"a": {"command": "x", "args": "-v"}}}, "args must be a list of strings"),
    ({"mcpServers": {"a": {"command": "x", "envs": {}}}}, "unknown key(s) envs"),
    ({"mcpServers": {"a": {"url": "http://h", "headers": {"X": "${UNSET_VAR_FOR_TEST}"}}}}, "${UNSET_VAR_FOR_TEST}, which is not set"),
])
def test_a_bad_mcp_config_is_one_clear_start_up_error(tmp_path: Path, config, says: str):
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, config), {})
    assert str(raised.value).startswith(f"CHAT_AGENT_MCP_CONFIG ({tmp_path / 'mcp.json'})") and says in str(raised.value)
    with pytest.raises(ConfigError):
        load_config(tmp_path / "missing.json", {})
