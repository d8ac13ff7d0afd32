"""The MCP supervisor in-process against a real streamable-HTTP MCP server: a server that dies
while idle is noticed without a call (its tools shown disabled with the reason), its tools
come back when it does, and closing leaves nothing running."""

from __future__ import annotations

import asyncio

from chat_agent.tooling import ToolRegistry
from chat_agent.tooling.mcp.config import HttpServer
from chat_agent.tooling.mcp.servers import McpServers
from tests.mcp_servers import HttpDemo
from tests.support import polled


def shown(registry: ToolRegistry, name: str):
    return next((a for a in registry.availability() if a.name == name), None)


async def test_an_idle_server_that_dies_is_noticed_and_comes_back(tmp_path):
    web = HttpDemo(tmp_path / "web.jsonl").start()
    registry = ToolRegistry()
    registry.attach(McpServers([HttpServer("web", web.url)], check_interval=0.3, retry_delays=(0.2, 1.0)))
    try:
        await registry.start()
        assert shown(registry, "web__echo").enabled and "web__*" not in [a.name for a in registry.availability()]
        web.kill()
        down = await polled(lambda: (a := shown(registry, "web__echo")) and not a.enabled and a, timeout=20)
        assert down.reason.startswith("MCP server web is down:")
        assert "web__echo" not in registry.enabled()  # not offered to the model meanwhile
        web.start()
        await polled(lambda: shown(registry, "web__echo").enabled, timeout=20)
        result = await registry.run("toolu_1", "web__echo", {"text": "hi"}, conversation_id="c", owner="o",
                                    on_progress=lambda *_: None)
        assert result.content == [{"type": "text", "text": "echo: hi"}] and not result.is_error
    finally:
        await registry.close()
        web.kill()
    await asyncio.sleep(0)
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and "mcp" in t.get_name()]
    assert not left, left
