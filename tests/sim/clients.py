"""Simulated clients: people with a browser tab on a conversation, connected to any instance.

A client connects (no id: a new conversation; else the one its tab shows), sends messages,
aborts, drops its socket and connects again, to the same or another instance, sometimes
asking for a `resume` from the last seq it holds and sending a message it got no answer to
again (with the same client id: the server must not answer it twice). Every frame it gets is
kept, per connection, for the checker, with what the store held when it was sent.

All of it runs on the clients' own loop; what crosses to an instance goes through that
instance's loop (`call_soon`), so each side runs only in its own steps.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from chat_agent.protocol import ToolPart, VisibleMessage, server_frames
from chat_agent.sessions.fold import fold
from tests.sim.model import PROBE, PROBE_REPLY

if TYPE_CHECKING:
    from tests.sim.node import Node, SimSocket
    from tests.sim.run import Simulation

SESSION_WAIT = 10.0  # seconds a client waits for its `session` before it gives the socket up


@dataclass(slots=True)
class Received:
    t: float
    seq: int | None
    type: str
    data: dict[str, Any]
    text: str
    stored: bool  # the store held exactly this frame under this seq when it was sent
    unavailable: bool  # the sending instance's writer was waiting for the store then


@dataclass
class Slot:
    """A conversation the clients share: its id once its first client created it and it was
    stored (with its first message)."""

    index: int
    id: str | None = None
    clients: list[Client] = field(default_factory=list)


class Conn:
    """One socket, as its client saw it."""

    def __init__(self, client: Client, node: Node, conversation_id: str | None):
        self.id = len(client.sim.connections) + 1
        self.client = client
        self.node = node.name
        self.conversation_id = conversation_id
        self.opened_at = client.sim.world.now
        self.session: dict[str, Any] | None = None
        self.frames: list[Received] = []
        self.closed: int | None = None  # close code, once closed (1006: dropped)
        self.closed_by_client = False
        self.resume_after: int | None = None
        self.replies: dict[str, VisibleMessage] = {}  # message id -> reply as folded from what came
        self.tool_message: dict[str, str] = {}  # tool id -> message id
        self.dones: dict[str, int] = {}  # message id -> how many `done` frames named it
        self.after_done: list[str] = []  # frames of a turn that came after its `done`
        self.socket: SimSocket | None = None
        self._waiters: list[asyncio.Future[None]] = []

    # ---- what arrives ---------------------------------------------------------------------

    def arrived(self, item: Received) -> None:
        if self.closed is not None:
            return
        if item.type == "session":
            self.session = item.data
            self.conversation_id = item.data.get("conversationId")
            for message in item.data.get("messages", []):
                if message.get("role") == "assistant":
                    reply = VisibleMessage.model_validate(message)
                    self.replies[reply.id] = reply
                    for part in reply.parts:
                        if isinstance(part, ToolPart):
                            self.tool_message[part.tool_id] = reply.id
        else:
            self.frames.append(item)
            if item.seq is None or item.seq > ((self.session or {}).get("seq") or 0):
                self._fold(item)  # one at or below the session's seq (a replay) is in the session already
        self.client.heard(self, item)
        self._wake()

    def _fold(self, item: Received) -> None:
        data = item.data
        message_id = data.get("messageId")
        tool_id = data.get("toolId")
        if message_id is None and tool_id is not None:
            message_id = self.tool_message.get(tool_id)
        if message_id is None:
            return
        if item.type in ("content_chunk", "thinking_chunk", "tool_start", "tool_progress", "tool_end", "done",
                         "status", "approval_request"):
            if self.dones.get(message_id):
                self.after_done.append(f"{item.type} seq={item.seq} after the done of {message_id}")
        if item.type == "status":
            return
        if item.type == "tool_start":
            self.tool_message[tool_id] = message_id
        reply = self.replies.get(message_id)
        if reply is None:
            reply = self.replies[message_id] = VisibleMessage(id=message_id, role="assistant", created_at=0.0,
                                                              status="streaming")
        fold(reply, server_frames.validate_python(data))
        if item.type == "done":
            self.dones[message_id] = self.dones.get(message_id, 0) + 1

    def gone(self, code: int) -> None:
        if self.closed is None:
            self.closed = code
            self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def until(self, condition: Callable[[], bool], timeout: float) -> bool:
        """Waits until `condition()` holds (True) or `timeout` seconds passed (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not condition():
            if loop.time() >= deadline:
                return False
            waiter = loop.create_future()
            self._waiters.append(waiter)
            timer = loop.call_at(deadline, lambda w=waiter: w.done() or w.set_result(None))
            try:
                await waiter
            finally:
                timer.cancel()
        return True

    # ---- what the client does ---------------------------------------------------------------

    def send(self, frame: dict[str, Any]) -> None:
        socket = self.socket
        if socket is None or self.closed is not None:
            return
        text = json.dumps(frame)
        socket.node.loop.call_soon(socket.push, text)

    def close(self) -> None:
        socket = self.socket
        if self.closed is None:
            self.closed = 1000
            self.closed_by_client = True
            self._wake()
            if socket is not None:
                socket.node.loop.call_soon(socket.leave)

    @property
    def open(self) -> bool:
        return self.closed is None

    @property
    def last_seq(self) -> int:
        seqs = [f.seq for f in self.frames if f.seq is not None]
        return max([*seqs, (self.session or {}).get("seq") or 0])


class Client:
    def __init__(self, sim: Simulation, name: str, slot: Slot, creator: bool):
        self.sim = sim
        self.name = name
        self.slot = slot
        self.creator = creator
        self.rng = random.Random(f"{name}:{sim.seed}")
        self.conns: list[Conn] = []
        self.conn: Conn | None = None
        self.last_seq = 0  # the newest seq this client holds, over all its sockets
        self.sent = 0
        self.pending: str | None = None  # the client id of a message with no `done` seen since it was sent
        self.dones_seen = 0
        self.keep_open = self.rng.random() < 0.6  # stays connected to the end (for the checker)

    def heard(self, conn: Conn, item: Received) -> None:
        if item.seq is not None:
            self.last_seq = max(self.last_seq, item.seq)
            if self.slot.id is None and self.creator and conn.conversation_id:
                # A frame of its log was stored: so was the conversation (it is stored with its
                # first message, PROTOCOL 1.2), and the other clients can open it now.
                self.slot.id = conn.conversation_id
        if item.type == "done":
            self.dones_seen += 1
            self.pending = None

    # ---- a life --------------------------------------------------------------------------------

    async def run(self, until: float) -> None:
        sim, rng, loop = self.sim, self.rng, asyncio.get_running_loop()
        await asyncio.sleep(rng.uniform(0.0, 3.0))
        while self.slot.id is None and not self.creator:
            await asyncio.sleep(0.5)
        while loop.time() < until:
            if self.conn is None or not self.conn.open:
                if not await self.connect():
                    await asyncio.sleep(rng.uniform(0.5, 2.0))
                continue
            conn, roll = self.conn, rng.random()
            if self.pending is not None:
                if roll < 0.15:
                    sim.trace(f"{self.name} aborts")
                    conn.send({"type": "abort"})
                    await asyncio.sleep(rng.uniform(0.0, 2.0))
                elif roll < 0.3:
                    self.drop()
                else:
                    seen = self.dones_seen
                    await conn.until(lambda: self.dones_seen > seen or not conn.open, rng.uniform(1.0, 15.0))
            elif roll < 0.35:
                self.message(conn)
                await asyncio.sleep(rng.uniform(0.0, 1.0))
            elif roll < 0.45:
                self.drop()
            else:
                await asyncio.sleep(rng.uniform(0.5, 6.0))
        if self.conn is not None and self.conn.open and not self.keep_open:
            self.drop()

    def message(self, conn: Conn, *, again: bool = False) -> None:
        if not again:
            self.sent += 1
        client_id = f"{self.name}-{self.sent}"
        self.pending = client_id
        self.sim.trace(f"{self.name} sends {client_id} on conn {conn.id} ({conn.node})")
        conn.send({"type": "message", "content": f"hello {client_id}", "id": client_id})

    def drop(self) -> None:
        if self.conn is not None:
            self.sim.trace(f"{self.name} drops conn {self.conn.id} ({self.conn.node})")
            self.conn.close()
            self.conn = None

    async def connect(self) -> bool:
        sim, rng = self.sim, self.rng
        nodes = sim.reachable_nodes()
        if not nodes:
            return False
        previous = self.conns[-1].node if self.conns else None
        node = next((n for n in nodes if n.name == previous), None) if rng.random() < 0.3 else None
        node = node or rng.choice(nodes)
        conn = Conn(self, node, self.slot.id)
        socket = node.open_socket(conn, self.slot.id)
        if socket is None:
            return False
        conn.socket = socket
        self.conns.append(conn)
        self.conn = conn
        sim.connections.append(conn)
        sim.trace(f"{self.name} opens conn {conn.id} on {node.name} ({self.slot.id})")
        if not await conn.until(lambda: conn.session is not None or not conn.open, SESSION_WAIT):
            sim.trace(f"{self.name} gives conn {conn.id} up: no session")
            self.drop()
            return False
        if conn.session is None:
            self.conn = None
            return False
        if self.slot.id is None:  # a new conversation, stored with its first message: sent at once
            self.message(conn)
            return True
        if self.last_seq and rng.random() < 0.5:
            conn.resume_after = self.last_seq
            conn.send({"type": "resume", "afterSeq": self.last_seq})
        if self.pending is not None and rng.random() < 0.3:
            self.message(conn, again=True)  # no answer seen: the same message again, same id
        return True


class Probe:
    """The checker's last visit to a conversation, once the faults are over: a new socket on
    any instance, a message, and its answer (`done`, end_turn) within a bound."""

    def __init__(self, sim: Simulation, slot: Slot):
        self.sim = sim
        self.slot = slot
        self.client = Client(sim, f"probe{slot.index}", slot, creator=False)
        self.answered = False
        self.attempts = 0

    async def run(self, within: float) -> None:
        sim, client = self.sim, self.client
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while loop.time() < deadline and not self.answered:
            if client.conn is None or not client.conn.open:
                if not await client.connect():
                    await asyncio.sleep(1.0)
                    continue
            conn = client.conn
            assert conn is not None
            self.attempts += 1
            client.sent += 1
            sim.trace(f"probe of {self.slot.id} sends on conn {conn.id} ({conn.node})")
            conn.send({"type": "message", "content": PROBE, "id": f"{client.name}-{client.sent}"})
            await conn.until(lambda: self._answered(conn) or not conn.open, min(10.0, deadline - loop.time()))
            self.answered = self._answered(conn)
            if not self.answered:
                await asyncio.sleep(2.0)  # busy (a turn still ends), or the socket went: again

    @staticmethod
    def _answered(conn: Conn) -> bool:
        return any(reply.content == PROBE_REPLY and conn.dones.get(message_id)
                   for message_id, reply in conn.replies.items())
