"""Tools named by configuration: `CHAT_AGENT_TOOLS` entries and the `chat_agent.tools` entry points.

An entry names a LangChain tool, a list of them, or a factory taking the settings that
returns either. What an operator wrote wrong (a module that does not import, something that
is no tool, a name already taken) stops the start with one line naming the entry: it never
heals by itself, and a tool silently missing is worse. A factory that raises
`ToolUnavailable` (its service is not configured) is shown disabled with its reason, like a
built-in tool.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Callable

from langchain_core.tools import BaseTool

from chat_agent.config import ConfigError, Settings
from chat_agent.tooling._registry import ToolRegistry
from chat_agent.tooling._types import ToolUnavailable

GROUP = "chat_agent.tools"
_NOT_A_NAME = re.compile(r"[^a-zA-Z0-9_-]+")


@dataclass(frozen=True, slots=True)
class Entry:
    """One place tools come from: what to call it in errors, and how to get the object."""

    label: str  # "CHAT_AGENT_TOOLS entry 'pkg.mod:tools'"
    name: str  # shown in session.tools when the whole entry is unavailable
    load: Callable[[], Any]


def configured_entries(settings: Settings) -> list[Entry]:
    """The entries of CHAT_AGENT_TOOLS, then the installed packages' entry points."""
    entries = [_from_setting(spec) for spec in settings.tools]
    for point in sorted(entry_points(group=GROUP), key=lambda p: p.name):
        package = f" of {point.dist.name} {point.dist.version}" if point.dist else ""
        entries.append(Entry(f"entry point {point.name!r}{package} (group {GROUP})", point.name, point.load))
    return entries


def add_configured_tools(registry: ToolRegistry, settings: Settings) -> None:
    """Adds every configured tool to `registry`; raises ConfigError for a bad entry."""
    taken: dict[str, str] = {name: "a built-in tool" for name in (a.name for a in registry.availability())}
    for entry in configured_entries(settings):
        try:
            tools = _tools_of(entry, settings)
        except ToolUnavailable as exc:
            name = _NOT_A_NAME.sub("_", entry.name)[:64]
            _refuse_clash(entry, name, taken)
            registry.add_unavailable(name, str(exc))
            taken[name] = entry.label
            continue
        for tool in tools:
            _refuse_clash(entry, tool.name, taken)
            timeout = (tool.metadata or {}).get("timeout")
            try:
                registry.add(tool, timeout=float(timeout) if timeout else None)
            except ValueError as exc:  # a bad name, an injected argument we cannot supply
                raise ConfigError(f"{entry.label}: tool {tool.name!r}: {exc}") from None
            taken[tool.name] = entry.label


def _from_setting(spec: str) -> Entry:
    module, sep, attribute = spec.partition(":")
    if not sep or not module.strip() or not attribute.strip():
        raise ConfigError(f"CHAT_AGENT_TOOLS entry {spec!r} must look like 'package.module:attribute'")
    label = f"CHAT_AGENT_TOOLS entry {spec!r}"
    return Entry(label, attribute.strip().rsplit(".", 1)[-1], lambda: _import(module.strip(), attribute.strip()))


def _import(module: str, attribute: str) -> Any:
    value: Any = importlib.import_module(module)
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


def _tools_of(entry: Entry, settings: Settings) -> list[BaseTool]:
    try:
        value = entry.load()
    except Exception as exc:
        raise ConfigError(f"{entry.label}: cannot load it: {type(exc).__name__}: {exc}") from None
    if isinstance(value, type) and issubclass(value, BaseTool):  # a tool class: its instance
        value = _call_factory(entry, value, None)
    elif callable(value) and not isinstance(value, BaseTool):
        value = _call_factory(entry, value, settings)
    tools = list(value) if isinstance(value, (list, tuple)) else [value]
    strays = [t for t in tools if not isinstance(t, BaseTool)]
    if strays or not tools:
        what = type(strays[0]).__name__ if strays else "an empty list"
        raise ConfigError(f"{entry.label}: expected a LangChain tool (BaseTool), a list of them or a factory "
                          f"taking the settings; got {what}")
    return tools


def _call_factory(entry: Entry, factory: Callable[..., Any], settings: Settings | None) -> Any:
    try:
        takes_settings = settings is not None and bool(inspect.signature(factory).parameters)
    except (TypeError, ValueError):  # a builtin without a signature: give it the settings
        takes_settings = True
    try:
        return factory(settings) if takes_settings else factory()
    except ToolUnavailable:
        raise
    except Exception as exc:
        raise ConfigError(f"{entry.label}: its factory failed: {type(exc).__name__}: {exc}") from None


def _refuse_clash(entry: Entry, name: str, taken: dict[str, str]) -> None:
    if name in taken:
        raise ConfigError(f"{entry.label}: tool name {name!r} is already taken by {taken[name]}; "
                          "rename one of them (a LangChain tool's `name`)")
