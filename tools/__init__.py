"""The tools the model may call: one module each, gathered into a registry."""

from __future__ import annotations

from types import ModuleType

from chat_agent.config import Settings
from chat_agent.tools import ToolRegistry, ToolUnavailable

from . import web_search

# Each module has NAME and build(settings) -> BaseTool, raising ToolUnavailable
# when its service is not configured. A new tool is one line here.
MODULES: tuple[ModuleType, ...] = (web_search,)


def build_registry(settings: Settings) -> ToolRegistry:
    registry = ToolRegistry(default_timeout=settings.tool_timeout, output_chars=settings.tool_output_chars)
    for module in MODULES:
        try:
            registry.add(module.build(settings))
        except ToolUnavailable as exc:
            registry.add_unavailable(module.NAME, str(exc))
    return registry
