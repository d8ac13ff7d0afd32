"""One live connection to an MCP server, through the `mcp` SDK's `Client`.

The SDK's client runs an anyio task group: a transport that fails (a killed HTTP server)
cancels the task that entered it. So the client lives in a task of its own (the owner),
and calls, made from the turns' tasks, race the owner's end: a call never hangs on a
connection that is gone, and a dead server never cancels a turn.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from typing import Any, Awaitable, Callable

import httpx2
import mcp_types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from chat_agent.tooling.mcp.config import HttpServer, ServerSpec

logger = logging.getLogger("chat_agent.tools.mcp")

Progress = Callable[[float, float | None, str | None], Awaitable[None]]
CLIENT_INFO = mcp_types.Implementation(name="chat-agent", version="1")


class ServerDown(Exception):
    """The server cannot take calls now; str() says why, for users and the model."""


class Connection:
    """A started server (or an open HTTP session) and its tools, until it ends.

    `open()` returns once the server answered the tool listing. `ended` is set when the
    connection is over: closed by us, the process exited, the HTTP server went away, or a
    periodic check went unanswered while idle (so a dead server is noticed without a call).
    """

    def __init__(self, spec: ServerSpec, *, check_interval: float = 15.0,
                 on_tools: Callable[[list[mcp_types.Tool]], None] | None = None) -> None:
        self.spec = spec
        self.tools: list[mcp_types.Tool] = []
        self.ended = asyncio.Event()
        self.why = ""  # why it ended, once it has
        self._check_interval = check_interval
        self._on_tools = on_tools
        self._client: Client | None = None
        self._stop = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None
        self._abandoned: set[asyncio.Task[Any]] = set()

    @property
    def usable(self) -> bool:
        """Open, and not known to be over (a call that saw it close ends it at once)."""
        return self._client is not None and not self._stop.is_set() and not self.ended.is_set()

    async def open(self, timeout: float) -> None:
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._owner = asyncio.create_task(self._own(ready), name=f"mcp:{self.spec.name}")
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(ready)
        except TimeoutError:
            await self.close()
            raise ServerDown(f"it did not answer within {timeout:g} s") from None
        except BaseException:
            await self.close()
            raise

    async def call(self, name: str, arguments: dict[str, Any], progress: Progress) -> mcp_types.CallToolResult:
        client = self._client
        if client is None or not self.usable:
            raise ServerDown(self.why or "it is not connected")
        call = asyncio.ensure_future(client.call_tool(name, arguments, progress_callback=progress))
        ended = asyncio.ensure_future(self.ended.wait())
        try:
            await asyncio.wait({call, ended}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # Abort: the SDK's cancelled call sends `notifications/cancelled` on its way out;
            # it does so in the background, so the turn is not held up by a slow server.
            self._abandon(call)
            raise
        finally:
            ended.cancel()
        if not call.done():
            self._abandon(call)
            raise ServerDown(f"it went away during the call ({self.why})")
        try:
            return call.result()
        except MCPError as exc:
            if exc.error.code != mcp_types.CONNECTION_CLOSED:
                raise
            self.why = "it closed the connection (it exited or crashed)"
            self._stop.set()  # end the owner, so the supervisor restarts it
            raise ServerDown("it closed the connection during the call (it exited or crashed)") from None

    async def close(self) -> None:
        self._stop.set()
        owner = self._owner
        if owner is not None and not owner.done():
            try:
                async with asyncio.timeout(5):  # the SDK ends a stdio server within 2 s + 2 s
                    await asyncio.shield(owner)
            except TimeoutError:
                owner.cancel()
                await asyncio.gather(owner, return_exceptions=True)
        for call in list(self._abandoned):
            call.cancel()

    async def _own(self, ready: asyncio.Future[None]) -> None:
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(await self._client_for(stack))
                self.tools = await _list_tools(client)
                self._client = client
                ready.set_result(None)
                await self._watch(client)
                self.why = self.why or "it was closed"
        except Exception as exc:  # the transport's failure, often an ExceptionGroup
            self.why = describe(exc, getattr(self.spec, "command", None))
            if ready.done():
                logger.warning("MCP server %s went away: %s", self.spec.name, self.why)
        finally:
            self._client = None
            self.ended.set()
            if not ready.done():
                ready.set_exception(ServerDown(self.why or "it stopped while starting"))

    async def _client_for(self, stack: AsyncExitStack) -> Client:
        spec = self.spec
        if isinstance(spec, HttpServer):
            # Read timeout as the SDK's own default: a server may hold an SSE stream open.
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=dict(spec.headers), timeout=httpx2.Timeout(30, read=300)))
            return Client(streamable_http_client(spec.url, http_client=http), client_info=CLIENT_INFO)
        params = StdioServerParameters(command=spec.command, args=list(spec.args), env=dict(spec.env) or None,
                                       cwd=spec.cwd)
        return Client(params, client_info=CLIENT_INFO)

    async def _watch(self, client: Client) -> None:
        """Until closed: while idle, asks for the tool listing now and then (modern servers
        have no ping), which notices a dead server and picks up a changed listing."""
        while not self._stop.is_set():
            try:
                async with asyncio.timeout(self._check_interval):
                    await self._stop.wait()
                return
            except TimeoutError:
                pass
            try:
                async with asyncio.timeout(10):
                    tools = await _list_tools(client, refresh=True)
            except Exception as exc:
                self.why = f"it stopped answering ({describe(exc)})"
                return
            if tools != self.tools:
                self.tools = tools
                if self._on_tools is not None:
                    self._on_tools(tools)

    def _abandon(self, call: asyncio.Future[Any]) -> None:
        call.cancel()
        if call.done():
            return
        self._abandoned.add(call)  # type: ignore[arg-type]
        call.add_done_callback(self._forget)

    def _forget(self, call: asyncio.Future[Any]) -> None:
        self._abandoned.discard(call)  # type: ignore[arg-type]
        if not call.cancelled():
            call.exception()  # retrieved: no "never retrieved" warning


async def _list_tools(client: Client, *, refresh: bool = False) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(100):  # a paginator that never ends cannot hang the start
        page = await client.list_tools(cursor=cursor, cache_mode="refresh" if refresh else "use")
        tools += page.tools
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def describe(exc: BaseException, command: str | None = None) -> str:
    """One line for users: the innermost real error of an exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = next((e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)), exc.exceptions[0])
    if isinstance(exc, MCPError):
        return exc.error.message
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or command or exc}"
    message = str(exc).strip()
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
