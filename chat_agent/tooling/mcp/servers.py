"""The configured MCP servers as a source of tools: started with the app, kept up while it
runs, closed when it stops. What `session.tools` says about them is always the present state.

Each server has a supervisor task: it connects (starting a stdio server's process), offers
the server's tools as NAME__TOOL, and when the connection ends (a crash, an HTTP server
gone) connects again at once; a server that cannot be reached is retried with a growing
delay, its tools shown disabled with the reason meanwhile (`NAME__*` when it never came up,
so its tools are not known yet). A call that arrives while its server restarts waits for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import mcp_types

from chat_agent.tooling._registry import ToolRegistry
from chat_agent.tooling.mcp.bridge import SEPARATOR, make_tool
from chat_agent.tooling.mcp.config import ServerSpec
from chat_agent.tooling.mcp.connection import Connection, Progress, ServerDown, describe

logger = logging.getLogger("chat_agent.tools.mcp")


class McpServers:
    """A `ToolSource` for `ToolRegistry.attach`."""

    def __init__(self, specs: list[ServerSpec], *, connect_timeout: float = 30.0, start_wait: float = 10.0,
                 retry_delays: tuple[float, float] = (1.0, 60.0), check_interval: float = 15.0) -> None:
        self._supervisors = [Supervisor(spec, connect_timeout=connect_timeout, retry_delays=retry_delays,
                                        check_interval=check_interval) for spec in specs]
        self._start_wait = start_wait

    async def start(self, registry: ToolRegistry) -> None:
        """Starts every server at once and waits (up to `start_wait`) for each to come up or
        fail once, so the first clients see their tools; slower ones join later."""
        for supervisor in self._supervisors:
            supervisor.start(registry)
        settled = [asyncio.ensure_future(s.settled.wait()) for s in self._supervisors]
        if settled:
            await asyncio.wait(settled, timeout=self._start_wait)
            for waiter in settled:
                waiter.cancel()

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self._supervisors))


class Supervisor:
    """Keeps one server connected and its tools in the registry truthful."""

    def __init__(self, spec: ServerSpec, *, connect_timeout: float, retry_delays: tuple[float, float],
                 check_interval: float) -> None:
        self.spec = spec
        self.settled = asyncio.Event()  # up, or failed once
        self._connect_timeout = connect_timeout
        self._first_delay, self._max_delay = retry_delays
        self._check_interval = check_interval
        self._registry: ToolRegistry | None = None
        self._connection: Connection | None = None
        self._reason = "starting"
        self._shown: list[str] = []  # names this server has in the registry, in order
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def start(self, registry: ToolRegistry) -> None:
        self._registry = registry
        self._show_down(f"MCP server {self.name} is starting")
        self._task = asyncio.create_task(self._supervise(), name=f"mcp-supervisor:{self.name}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._connection is not None:
            await self._connection.close()

    async def call(self, remote: str, arguments: dict[str, Any], progress: Progress) -> mcp_types.CallToolResult:
        """A call of the server's tool `remote`; waits for a restart under way."""
        connection = self._connection
        if connection is None or not connection.usable:
            connection = await self._usable()
        try:
            return await connection.call(remote, arguments, progress)
        except ServerDown as exc:
            raise ServerDown(f"MCP server {self.name}: {exc}; it is being restarted") from None

    async def _usable(self) -> Connection:
        try:
            async with asyncio.timeout(self._connect_timeout):
                while True:  # only while it restarts, so a plain poll is cheap enough
                    connection = self._connection
                    if connection is not None and connection.usable:
                        return connection
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise ServerDown(f"MCP server {self.name} is down: {self._reason}") from None

    async def _supervise(self) -> None:
        delay = self._first_delay  # before the next attempt to reach a server that is down
        again = 0.0  # before restarting one that ended: at once, unless it keeps dying young
        while True:
            connection = Connection(self.spec, check_interval=self._check_interval, on_tools=self._show_up)
            try:
                await connection.open(self._connect_timeout)
            except Exception as exc:  # ServerDown, or the SDK's own: a bad command, a refused connection
                self._down(str(exc) if isinstance(exc, ServerDown) else describe(exc), delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._max_delay)
                continue
            delay = self._first_delay
            self._connection = connection
            self._show_up(connection.tools)
            started = asyncio.get_running_loop().time()
            await connection.ended.wait()
            self._reason = connection.why
            await connection.close()
            wait = again if asyncio.get_running_loop().time() - started < 30 else 0.0
            again = min(max(wait * 2, self._first_delay), self._max_delay)
            logger.warning("MCP server %s ended (%s): restarting it in %g s", self.name, connection.why, wait)
            await asyncio.sleep(wait)

    def _down(self, reason: str, delay: float) -> None:
        self._reason = reason
        logger.warning("MCP server %s is down: %s (retrying in %g s)", self.name, reason, delay)
        self._show_down(f"MCP server {self.name} is down: {reason} (retrying)")
        self.settled.set()

    def _show_up(self, tools: list[mcp_types.Tool]) -> None:
        registry = self._registry
        assert registry is not None
        names: list[str] = []
        for tool in tools:
            made = make_tool(self.name, tool, self.call)
            if made.name in names:
                logger.warning("MCP server %s: tool %r clashes with another of its tools once named %s; "
                               "not offered", self.name, tool.name, made.name)
                continue
            try:
                registry.add(made, timeout=self.spec.timeout, replace=made.name in self._shown)
            except ValueError as exc:
                logger.warning("MCP server %s: tool %r not offered: %s", self.name, tool.name, exc)
                continue
            names.append(made.name)
        for gone in set(self._shown) - set(names):
            registry.remove(gone)
        self._shown = names
        self.settled.set()
        logger.info("MCP server %s is up: %s", self.name, ", ".join(names) or "no tools")

    def _show_down(self, reason: str) -> None:
        """Every tool of the server disabled with the reason; `NAME__*` while none is known."""
        registry = self._registry
        assert registry is not None
        placeholder = f"{self.name}{SEPARATOR}*"
        names = [n for n in self._shown if n != placeholder] or [placeholder]
        for name in names:
            registry.add_unavailable(name, reason, replace=name in self._shown)
        for gone in set(self._shown) - set(names):
            registry.remove(gone)
        self._shown = names

