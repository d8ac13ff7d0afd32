"""The Tool Registry: the one place where tool calls run and failures become is_error results."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any, Callable, Collection, Protocol

from langchain_core.tools import BaseTool
from pydantic import ValidationError

from chat_agent.tooling._adapter import NO_ARTIFACT, Adapter
from chat_agent.tooling._caps import cap_content, cap_output, cap_status, cap_text
from chat_agent.tooling._progress import Pulse
from chat_agent.tooling._schema import anthropic_schema
from chat_agent.tooling._types import ToolAvailability, ToolContext, ToolResult, ToolServices
from chat_agent.model.types import KeptMessage
from chat_agent.text import scrub, scrub_json
from chat_agent.tracing import tool_span

logger = logging.getLogger("chat_agent.tools")

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # what the Messages API accepts
_SHOWN = re.compile(r"^[a-zA-Z0-9_*-]{1,128}$")  # a tool not offered is only shown
# Block types a tool_result may hold; a list of other dicts is data, sent as JSON.
_BLOCK_TYPES = frozenset({"text", "image", "document", "search_result"})


class ToolSource(Protocol):
    """Tools that come and go while the server runs (an MCP server's): the source adds them
    to the registry, and marks them unavailable with a reason while they cannot be called."""

    async def start(self, registry: "ToolRegistry") -> None:
        """Called once the app starts; must not raise for a service that is down."""

    async def close(self) -> None:
        """Called when the app stops: ends what `start` began."""


class ToolRegistry:
    """Tools the model may call, their Anthropic schemas, and how to run them.

    `run()` never raises for a tool's failure: bad input, an unknown tool, a
    timeout or any exception come back as `ToolResult(is_error=True)` with a
    one-line `ExceptionType: message` (tracebacks go to the log only).
    `asyncio.CancelledError` is the exception: it propagates untouched, because
    abort is plain task cancellation and the caller repairs the history.

    Cancelling or timing out an async tool cancels its work. A sync tool runs in
    a worker thread, which Python cannot interrupt: the await still returns at
    once, and the thread finishes on its own in the background (its late
    `ctx.progress` reports are dropped).
    """

    def __init__(self, *, default_timeout: float = 120.0, output_chars: int = 40_000, heartbeat: float = 1.0) -> None:
        if default_timeout <= 0 or output_chars <= 0 or heartbeat <= 0:
            raise ValueError("default_timeout, output_chars and heartbeat must be positive")
        self._default_timeout = default_timeout
        self._output_chars = output_chars
        self._heartbeat = heartbeat
        self._tools: dict[str, Adapter] = {}
        self._schemas: dict[str, dict[str, Any]] = {}
        self._unavailable: dict[str, str] = {}
        self._order: list[str] = []  # registration order: what the model and session.tools see
        self._sources: list[ToolSource] = []
        self.version = 0  # goes up with every change of what is offered or shown (`availability`)

    def add(self, tool: BaseTool, *, timeout: float | None = None, replace: bool = False) -> None:
        """Offer `tool` to the model; `timeout` (seconds) overrides the default. With `replace`,
        a tool of that name (offered or not) gives way and the new one keeps its place."""
        if not _NAME.match(tool.name):
            raise ValueError(f"invalid tool name {tool.name!r}: the API wants 1-64 of [a-zA-Z0-9_-]")
        adapter = Adapter(tool, self._default_timeout if timeout is None else timeout)
        schema = KeptMessage(anthropic_schema(tool))  # once: stable bytes keep the prompt cache warm
        self._make_room(tool.name, replace)
        self._schemas[tool.name] = schema
        self._tools[tool.name] = adapter
        self.version += 1

    def add_unavailable(self, name: str, reason: str, *, replace: bool = False) -> None:
        """Record a tool that is not offered (its service is not configured, its server is
        down), and why. The name is only shown, never sent to the model: `server__*` is fine."""
        if not _SHOWN.match(name):
            raise ValueError(f"invalid tool name {name!r}: 1-128 of [a-zA-Z0-9_*-]")
        self._make_room(name, replace)
        self._unavailable[name] = reason
        self.version += 1

    def remove(self, name: str) -> None:
        """Forget a tool (an MCP server no longer lists it); unknown names are ignored."""
        self._tools.pop(name, None)
        self._schemas.pop(name, None)
        self._unavailable.pop(name, None)
        if name in self._order:
            self._order.remove(name)
        self.version += 1

    def attach(self, source: ToolSource) -> None:
        """A source of tools that come and go (MCP servers): started and closed with the app."""
        self._sources.append(source)

    async def start(self) -> None:
        """Starts the attached sources; each reports its own trouble as unavailable tools."""
        for source in self._sources:
            await source.start(self)

    async def close(self) -> None:
        for source in reversed(self._sources):
            try:
                await source.close()
            except Exception:  # one source failing to close must not keep the others open
                logger.exception("closing a tool source failed")

    def availability(self) -> list[ToolAvailability]:
        return [
            ToolAvailability(name, True) if name in self._tools else ToolAvailability(name, False, self._unavailable[name])
            for name in self._order
        ]

    def streamed_field(self, name: str) -> str | None:
        """The input field whose text streams to the client while the model writes it
        (a tool declares it as `metadata={"streams": field}`)."""
        adapter = self._tools.get(name)
        field = (adapter.tool.metadata or {}).get("streams") if adapter is not None else None
        return field if isinstance(field, str) else None

    def repeatable(self, name: str) -> bool:
        """Whether a call may run a second time when its turn continues after a failure (a
        tool declares it as `metadata={"repeatable": True}`: it reads, changes nothing)."""
        adapter = self._tools.get(name)
        return adapter is not None and (adapter.tool.metadata or {}).get("repeatable") is True

    def enabled(self) -> list[str]:
        return [name for name in self._order if name in self._tools]

    def schemas(self, names: Collection[str] | None = None) -> list[dict]:
        """Anthropic `tools` params of the enabled tools (all, or those in `names`), in
        registration order. The dicts are shared and cached: do not mutate them."""
        return [self._schemas[name] for name in self._order
                if name in self._schemas and (names is None or name in names)]

    async def run(
        self,
        tool_id: str,
        name: str,
        tool_input: dict,
        *,
        conversation_id: str,
        owner: str,
        on_progress: Callable[[str, float, str], None],
        services: ToolServices | None = None,
    ) -> ToolResult:
        """Run one tool call. `on_progress(tool_id, elapsed_seconds, status)` gets the
        tool's own reports plus a heartbeat after `heartbeat` seconds of silence."""
        with tool_span(name, tool_id) as span:
            result = await self._run(tool_id, name, tool_input, conversation_id, owner, on_progress, services)
            span.ended(result.is_error, result.error_type)
            return result

    async def _run(self, tool_id: str, name: str, tool_input: dict, conversation_id: str, owner: str,
                   on_progress: Callable[[str, float, str], None], services: ToolServices | None) -> ToolResult:
        adapter = self._tools.get(name)
        if adapter is None:
            return self._error(self._unknown(name), "unavailable" if name in self._unavailable else "unknown_tool")
        if not isinstance(tool_input, dict):
            return self._error(f"Invalid input for {name}: expected a JSON object, got {type(tool_input).__name__}",
                               "invalid_input")
        def progress(tool_id: str, elapsed: float, status: str) -> None:
            on_progress(tool_id, elapsed, cap_status(status))

        pulse = Pulse(tool_id, progress, self._heartbeat, asyncio.get_running_loop())
        ctx = ToolContext(conversation_id, owner, tool_id, pulse.report, services or ToolServices())
        try:
            return await self._call(adapter, tool_input, ctx)
        finally:
            pulse.stop()  # also on cancel and timeout: no heartbeat outlives the call

    async def _call(self, adapter: Adapter, tool_input: dict, ctx: ToolContext) -> ToolResult:
        try:
            args = adapter.bind(tool_input, ctx)
        except ValidationError as exc:
            logger.info("invalid input for tool %s: %s", adapter.name, exc)
            return self._error(_invalid_input(adapter.name, exc), "invalid_input")
        except Exception as exc:  # a custom validator of the tool's own schema
            return self._failure(adapter.name, exc)
        timeout = asyncio.timeout(adapter.timeout)
        try:
            async with timeout:
                content, artifact, is_error = await adapter.invoke(args, ctx)
        except TimeoutError as exc:
            if not timeout.expired():  # the tool's own TimeoutError, not ours
                return self._failure(adapter.name, exc)
            logger.warning("tool %s (%s) timed out after %g s", adapter.name, ctx.tool_id, adapter.timeout)
            return self._error(f"Tool {adapter.name} timed out after {adapter.timeout:g} s", "timeout")
        except Exception as exc:
            return self._failure(adapter.name, exc)
        # Text from anywhere (a web page, a file, a library): a lone surrogate becomes U+FFFD
        # here, once, so the model, the client and the store all see the same text.
        # Both what the model gets and what the UI shows (and the store keeps) are capped here,
        # after the tool: a tool's own bounds are not trusted to cover its notes and lists.
        content = cap_content(scrub_json(_as_content(content)), self._output_chars)
        output = content if artifact is NO_ARTIFACT else cap_output(scrub_json(artifact), self._output_chars)
        return ToolResult(content, output, is_error, "tool_error" if is_error else None)

    def _make_room(self, name: str, replace: bool) -> None:
        known = name in self._tools or name in self._unavailable
        if known and not replace:
            raise ValueError(f"tool {name!r} is already registered")
        self._tools.pop(name, None)
        self._schemas.pop(name, None)
        self._unavailable.pop(name, None)
        if not known:
            self._order.append(name)

    def _unknown(self, name: str) -> str:
        if name in self._unavailable:
            return f"Tool {name} is unavailable: {self._unavailable[name]}"
        return f"Unknown tool {name!r}. Available tools: {', '.join(self.enabled()) or 'none'}"

    def _failure(self, name: str, exc: Exception) -> ToolResult:
        logger.error("tool %s failed", name, exc_info=exc)
        message = str(exc).strip()
        return self._error(f"{type(exc).__name__}: {message}" if message else type(exc).__name__,
                           type(exc).__name__)

    def _error(self, message: str, error_type: str) -> ToolResult:
        message = cap_text(scrub(message), self._output_chars)
        return ToolResult(message, message, True, error_type)


def _as_content(value: Any) -> str | list[dict]:
    """What LangChain would put in a ToolMessage, in the shape Anthropic's tool_result takes."""
    if isinstance(value, str):
        return value or "(no output)"
    if value is None:
        return "(no output)"
    if isinstance(value, list) and value and all(isinstance(b, str) or _is_block(b) for b in value):
        return [{"type": "text", "text": b} if isinstance(b, str) else b for b in value]
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # circular structures
        return str(value)


def _is_block(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") in _BLOCK_TYPES


def _invalid_input(name: str, exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "input"
        problem = f"{where}: {error['msg']}"
        if error["type"] != "missing" and where != "input":
            problem += f" (got {json.dumps(error.get('input'), default=str)[:80]})"
        problems.append(problem)
    return f"Invalid input for {name}: " + "; ".join(problems)
