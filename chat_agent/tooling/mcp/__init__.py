"""MCP servers as a source of tools (`CHAT_AGENT_MCP_CONFIG`), through the `mcp` SDK.

`config` reads the file, `connection` holds one live session, `bridge` makes a server's tool
a LangChain tool for the registry, `servers` keeps the servers up and `session.tools` true.
"""

from __future__ import annotations

from chat_agent.config import Settings
from chat_agent.tooling._registry import ToolRegistry
from chat_agent.tooling.mcp.config import load_config


def attach_mcp_servers(registry: ToolRegistry, settings: Settings) -> None:
    """The servers of `settings.mcp_config`, attached to `registry` (started with the app).
    A file that cannot be read or has the wrong shape raises ConfigError now."""
    if settings.mcp_config is None:
        return
    specs = load_config(settings.mcp_config)
    if not specs:
        return
    # Imported only when configured: the SDK takes a while to import.
    from chat_agent.tooling.mcp.servers import McpServers

    registry.attach(McpServers(specs))
