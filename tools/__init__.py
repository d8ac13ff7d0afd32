"""The tools the model may call: one module each, gathered into a registry."""

from __future__ import annotations

from typing import Callable

from langchain_core.tools import BaseTool

from chat_agent.tooling import Settings, ToolRegistry, ToolUnavailable, add_configured_tools, attach_mcp_servers

from . import (analyze_document, artifacts, code_interpreter, deep_research, images, reflect, search_knowledge,
               update_plan, web_search)

Builder = Callable[[Settings], BaseTool]

# (name, build): build raises ToolUnavailable when the tool's service is not configured.
# The order is the order the model sees, kept stable so the prompt prefix stays cacheable.
BUILDERS: tuple[tuple[str, Builder], ...] = (
    ("generate_artifact", artifacts.build_generate),
    ("rewrite_artifact", artifacts.build_rewrite),
    ("update_artifact", artifacts.build_update),
    ("web_search", web_search.build),
    ("reflect", reflect.build),
    ("update_plan", update_plan.build),
    ("deep_research", deep_research.build),
    ("analyze_document", analyze_document.build),
    ("search_knowledge", search_knowledge.build),  # offered only to a message that names collections
    ("generate_image", images.build_generate),
    ("edit_image", images.build_edit),
    ("code_interpreter", code_interpreter.build),
)


def build_registry(settings: Settings) -> ToolRegistry:
    """The built-in tools, then those configured (CHAT_AGENT_TOOLS, installed packages' entry
    points) and the MCP servers' (CHAT_AGENT_MCP_CONFIG). Raises ConfigError for a bad entry."""
    registry = ToolRegistry(default_timeout=settings.tool_timeout, output_chars=settings.tool_output_chars)
    for name, build in BUILDERS:
        try:
            tool = build(settings)
        except ToolUnavailable as exc:
            registry.add_unavailable(name, str(exc))
            continue
        # A tool that is slow by nature (image APIs, research, code) declares its own limit.
        timeout = (tool.metadata or {}).get("timeout")
        registry.add(tool, timeout=float(timeout) if timeout else None)
    add_configured_tools(registry, settings)
    attach_mcp_servers(registry, settings)
    return registry
