"""One simulated instance of the server: the real sessions layer composed as `web/app.py`
composes it (store writer, model, tools, bus, hub, background queue), on a loop of its own,
with the real WebSocket endpoint (`web/ws.chat_endpoint` and its `Connection`) serving
sockets that the simulated clients open.
"""

from __future__ import annotations

import asyncio
import random
import traceback
from collections import deque
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from starlette.websockets import WebSocketDisconnect, WebSocketState

from chat_agent.agent.loop import Agent
from chat_agent.config import Settings
from chat_agent.files.blobs import LocalBlobs
from chat_agent.files.catalog import Files
from chat_agent.quotas import Quotas
from chat_agent.quotas.counters import MemoryCounters
from chat_agent.sessions.hub import Hub
from chat_agent.sessions.queue import LocalQueue
from chat_agent.store import StoreWriter
from chat_agent.tooling import ToolRegistry
from chat_agent.urgency import Urgency
from chat_agent.web.auth import Authenticator
from chat_agent.web.backlog import Backlogs
from chat_agent.web.ws import chat_endpoint
from tests.sim.bus import SimBus
from tests.sim.model import SimModel, lookup_tool, record_tool
from tests.sim.store import SimStore

if TYPE_CHECKING:
    from tests.sim.clients import Conn
    from tests.sim.run import Simulation

LEASE_SECONDS = 10.0
SETTINGS = dict(lease_seconds=LEASE_SECONDS, model_idle_timeout=20.0, status_interval=5.0, max_steps=4,
                data_dir=Path("/nonexistent/chat-agent-sim"))


class Node:
    def __init__(self, sim: Simulation, name: str):
        self.sim = sim
        self.name = name
        self.loop = sim.world.loop(name)
        self.rng = random.Random(f"{name}:{sim.seed}")
        self.hub: Hub | None = None
        self.writer: StoreWriter | None = None
        self.available_at: float | None = None  # when its writer last found the store again
        self.ready = False
        self.dead = False
        self.started_at = sim.world.now
        self.sockets: list[SimSocket] = []
        self.backlogs = Backlogs(512 << 20, 64 << 20)
        self.state: SimpleNamespace | None = None  # the app's state, as the endpoint reads it
        self._forever: asyncio.Event | None = None  # held: a task waiting on what nobody holds is collected

    def start(self) -> None:
        self.loop.create_task(self._supervised(), name=f"{self.name}:main")

    async def _supervised(self) -> None:
        """A process that fails to start (its store unreachable) is started again a moment
        later, as a supervisor would."""
        while True:
            try:
                await self._main()
                return
            except Exception as exc:
                self.sim.trace(f"{self.name} failed to start: {exc!r}; again in 2 s")
                await asyncio.sleep(2.0)

    async def _main(self) -> None:
        sim = self.sim
        settings = Settings(instance_id=self.name, **SETTINGS)  # type: ignore[arg-type]
        store = SimStore(sim, self.name, sim.db, random.Random(f"store:{self.name}:{sim.seed}"))
        urgency = Urgency()  # shared by the writer and the agent, as the app composes them
        writer = StoreWriter(store, urgency=urgency)
        went = writer._went

        def noted(*, available: bool) -> None:
            # Frames the conversation let out while the store was away may reach their socket
            # in the same instant the store came back: they were let out unstored, rightly.
            if available and writer.unavailable:
                self.available_at = sim.world.now
            went(available=available)

        writer._went = noted  # type: ignore[method-assign]
        writer.start()
        self.writer = writer
        tools = ToolRegistry(default_timeout=settings.tool_timeout, output_chars=settings.tool_output_chars)
        tools.add(lookup_tool())
        tools.add(record_tool())
        agent = Agent(SimModel(sim, random.Random(f"model:{self.name}:{sim.seed}")), tools, settings,
                      urgency)
        files = Files(store, writer, LocalBlobs(settings.data_dir), max_bytes=settings.upload_max_bytes)
        bus = SimBus(self.name, sim.network, self.loop)
        hub = Hub(settings, store, writer, agent, sim.counter, files, bus=bus, queue=LocalQueue())
        sim.bugs.install(hub)
        self.hub = hub
        # What the endpoint reads of the app besides the hub (no sign-in, no limits: a user
        # who runs it on its defaults).
        self.state = SimpleNamespace(hub=hub, backlogs=self.backlogs, auth=Authenticator(settings),
                                     quotas=Quotas(settings.limits, MemoryCounters(), store))
        try:
            async with hub.running():
                await hub.start_work()
                self.ready = True
                sim.trace(f"{self.name} ready")
                self._forever = asyncio.Event()
                await self._forever.wait()  # until the simulation ends (or the process is killed)
        finally:
            await _stop(writer._task)  # as the app's exit stack closes it (no flush: the store may be gone)

    # ---- sockets --------------------------------------------------------------------------------

    def open_socket(self, conn: Conn, conversation_id: str | None) -> SimSocket | None:
        """A client connects: the endpoint serves the socket from the next step of this loop."""
        if self.dead or not self.ready:
            return None
        socket = SimSocket(self, conn, conversation_id)
        self.sockets.append(socket)
        self.loop.call_soon(self._serve, socket)
        return socket

    def _serve(self, socket: SimSocket) -> None:
        self.loop.create_task(self._endpoint(socket), name=f"{self.name}:socket:{socket.conn.id}")

    async def _endpoint(self, socket: SimSocket) -> None:
        try:
            await chat_endpoint(socket)  # type: ignore[arg-type]
        except Exception as exc:  # the ASGI server closes the socket (1011) and logs it
            where = " <- ".join(f"{f.name}:{f.lineno}" for f in reversed(traceback.extract_tb(exc.__traceback__)))
            self.sim.trace(f"{self.name}: the endpoint of conn {socket.conn.id} raised {exc!r} at {where}")
            self.sim.endpoint_errors.append(f"{type(exc).__name__}: {exc}")
            await socket.close(1011)
        finally:
            socket.ended()

    def killed(self) -> None:
        self.dead = True
        for socket in self.sockets:
            socket.cut()


async def _stop(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class SimSocket:
    """The server's side of one client's WebSocket, as `chat_endpoint` and `Connection` use a
    Starlette WebSocket. Frames reach the client in the order they are sent, at once."""

    def __init__(self, node: Node, conn: Conn, conversation_id: str | None):
        self.node = node
        self.conn = conn
        self.app = SimpleNamespace(state=node.state)
        self.headers: dict[str, str] = {}
        self.query_params = {"conversationId": conversation_id} if conversation_id else {}
        self._incoming: deque[dict[str, Any]] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self.left = False  # the client closed it
        self.closed = False  # the server closed it
        self.over = False  # the endpoint returned

    # what the endpoint calls

    @property
    def client_state(self) -> WebSocketState:
        return WebSocketState.DISCONNECTED if self.left else WebSocketState.CONNECTED

    @property
    def application_state(self) -> WebSocketState:
        return WebSocketState.DISCONNECTED if self.closed else WebSocketState.CONNECTED

    async def accept(self) -> None:
        pass

    async def receive(self) -> dict[str, Any]:
        while not self._incoming:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._incoming.popleft()

    async def send_text(self, text: str) -> None:
        if self.left or self.closed:
            raise WebSocketDisconnect(1006)
        self.node.sim.sent(self, text)

    async def close(self, code: int = 1000) -> None:
        if self.closed or self.left:
            return
        self.closed = True
        self.node.sim.closed_by_server(self, code)

    # what the client does, on this socket's loop

    def push(self, text: str) -> None:
        self._add({"type": "websocket.receive", "text": text})

    def leave(self) -> None:
        self.left = True
        self._add({"type": "websocket.disconnect", "code": 1000})

    def _add(self, message: dict[str, Any]) -> None:
        self._incoming.append(message)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def ended(self) -> None:
        self.over = True
        if not self.closed and not self.left and not self.node.dead:
            # The endpoint returned without closing: the ASGI server drops the connection,
            # and the client sees it end without a close frame or a word of why.
            self.node.sim.endpoint_errors.append(f"conn {self.conn.id}: the endpoint returned without closing it")
            self.closed = True
            self.node.sim.closed_by_server(self, 1006)

    def cut(self) -> None:
        """The process died: the client sees the connection drop (no close frame)."""
        if not self.closed and not self.left:
            self.closed = True
            self.node.sim.closed_by_server(self, 1006)
