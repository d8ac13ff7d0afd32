"""What each client saw: every frame of every socket, as it arrived, with when.

A `Sock` reads its socket from the moment it is opened until it closes, whatever the test
does meanwhile, so nothing is missed while a test waits on something else. A `Talk` is one
person on one conversation: it sends messages and knows which turns it asked for, and
retries a message the server would not take (that is what a user does), writing down
every refusal and when it came.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import websockets

from tests.support import ServerProcess, connect

Frame = dict[str, Any]


@dataclass(slots=True)
class Seen:
    at: float  # monotonic
    frame: Frame


class Sock:
    """One socket on one conversation, read until it closes."""

    def __init__(self, name: str, instance: int, ws: Any, session: Frame, since: float):
        self.name = name
        self.instance = instance  # index of the server it is connected to
        self.ws = ws
        self.session = session
        self.opened_at = since
        self.frames: list[Seen] = []
        self.closed_by_server: tuple[int | None, str] | None = None
        self.closed_at: float | None = None
        self._left = False  # closed by the test (a client leaving)
        self._new = asyncio.Event()
        self._reader = asyncio.get_running_loop().create_task(self._read(), name=f"sock:{name}")

    @classmethod
    async def open(cls, name: str, servers: list[ServerProcess], instance: int, conversation: str | None = None,
                   timeout: float = 30) -> Sock:
        since = time.monotonic()
        ws, session = await asyncio.wait_for(connect(servers[instance], conversation), timeout)
        assert session["type"] == "session", session
        return cls(name, instance, ws, session, since)

    @property
    def conversation(self) -> str:
        return self.session["conversationId"]

    @property
    def open_(self) -> bool:
        return self.closed_at is None

    async def _read(self) -> None:
        try:
            async for text in self.ws:
                self.frames.append(Seen(time.monotonic(), json.loads(text)))
                self._new.set()
        except websockets.ConnectionClosed:
            pass
        finally:
            self.closed_at = time.monotonic()
            if not self._left:
                self.closed_by_server = (self.ws.close_code, self.ws.close_reason or "")
            self._new.set()

    async def close(self) -> None:
        self._left = True
        await self.ws.close()
        await asyncio.gather(self._reader, return_exceptions=True)

    async def send(self, **frame: Any) -> None:
        await self.ws.send(json.dumps(frame))

    async def wait(self, found: Callable[[Frame], bool], start: int = 0, timeout: float = 30.0) -> tuple[int, Frame]:
        """The first frame from index `start` on for which `found` is true, and its index;
        TimeoutError after `timeout` s, EOFError if the socket closes first."""
        deadline = time.monotonic() + timeout
        i = start
        while True:
            while i < len(self.frames):
                if found(self.frames[i].frame):
                    return i, self.frames[i].frame
                i += 1
            if self.closed_at is not None:
                raise EOFError(f"{self.name} closed by the server: {self.closed_by_server}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{self.name}: nothing such in {timeout} s")
            self._new.clear()
            try:
                await asyncio.wait_for(self._new.wait(), left)
            except TimeoutError:
                pass

    def idle(self) -> bool:
        """Whether, as far as this socket was told, no turn runs: the last frame of a turn it
        got was a `done` (or it got none, and its `session` said none ran)."""
        # (By seq, not arrival: a resume may send what the `session` summed up after live frames.)
        last = max((s.frame for s in self.frames if "seq" in s.frame and "messageId" in s.frame),
                   key=lambda f: f["seq"], default=None)
        return last["type"] == "done" if last is not None else not self.session.get("running")

    def seq_frames(self) -> list[Frame]:
        return [s.frame for s in self.frames if "seq" in s.frame]

    def last_seq(self) -> int:
        seqs = [f["seq"] for f in self.seq_frames()]
        return max(seqs, default=self.session.get("seq") or 0)


@dataclass(slots=True)
class Attempt:
    """One `message` sent, and what came of it."""

    content: str
    sent_at: float
    previous_done_seen: bool  # the client had seen the end of every turn it asked for before
    # "taken" (a turn ran to `done`), "refused" (an error, no turn), "silent", "closed" (the socket)
    outcome: str = "pending"
    code: str | None = None  # the refusal's code
    stop: str | None = None  # the turn's stopReason
    message_id: str | None = None
    first_frame_at: float | None = None  # its turn's first frame (it was taken)
    done_at: float | None = None


@dataclass
class Talk:
    """A person on one conversation and the socket they send on. When the server closes it,
    they open another on the same instance (named `NAME#2`, ...), added to `socks`."""

    sock: Sock
    servers: list[ServerProcess]
    socks: list[Sock]  # every socket of the run, for the checker
    attempts: list[Attempt] = field(default_factory=list)
    reconnects: int = 0

    async def reconnect(self) -> Sock:
        self.reconnects += 1
        name = f"{self.sock.name.split('#')[0]}#{self.reconnects + 1}"
        self.sock = await Sock.open(name, self.servers, self.sock.instance, self.sock.conversation)
        self.socks.append(self.sock)
        return self.sock

    async def ask(self, content: str, *, timeout: float = 60.0) -> Attempt:
        """Sends one message and waits for its outcome: its turn's `done`, or a refusal (an
        `error` with no turn after it), or nothing at all within `timeout` s."""
        sock = self.sock
        idle = sock.idle() and all(a.outcome in ("taken", "refused") for a in self.attempts)
        attempt = Attempt(content, time.monotonic(), previous_done_seen=idle)
        self.attempts.append(attempt)
        start = len(sock.frames)
        try:
            await sock.send(type="message", content=content)
        except websockets.ConnectionClosed:
            attempt.outcome = "closed"
            return attempt
        try:
            while True:
                i, frame = await sock.wait(lambda f: f["type"] in ("done", "error", "content_chunk", "tool_start")
                                           or (f["type"] == "status" and f.get("messageId")), start, timeout)
                start = i + 1
                if frame["type"] == "error" and attempt.message_id is None:
                    # A refusal has no turn after it; an error of a turn that failed has its `done`.
                    try:
                        _, done = await sock.wait(lambda f: f["type"] == "done", start, 2.0)
                    except TimeoutError:
                        attempt.outcome, attempt.code = "refused", frame.get("code")
                        return attempt
                    frame = done
                if attempt.message_id is None and frame.get("messageId"):
                    attempt.message_id = frame["messageId"]
                if attempt.first_frame_at is None and "seq" in frame and frame.get("messageId"):
                    attempt.first_frame_at = sock.frames[i].at  # its turn's first frame (not a status)
                if frame["type"] == "done":
                    attempt.outcome, attempt.stop = "taken", frame["stopReason"]
                    attempt.message_id = attempt.message_id or frame["messageId"]
                    attempt.done_at = time.monotonic()
                    return attempt
        except TimeoutError:
            attempt.outcome = "silent"
            return attempt
        except EOFError:
            attempt.outcome = "closed"
            return attempt

    async def until_taken(self, content: str, deadline: float, pause: float = 0.5) -> Attempt | None:
        """Sends the message again until a turn answers it in full (`end_turn`), as a person
        would; the attempt that did, or None if none did before `deadline` (monotonic)."""
        n = 0
        while time.monotonic() < deadline:
            if not self.sock.open_:
                try:
                    await self.reconnect()
                except Exception:
                    await asyncio.sleep(pause)
                    continue
            attempt = await self.ask(f"{content} (try {n})", timeout=max(1.0, deadline - time.monotonic()))
            n += 1
            if attempt.outcome == "taken" and attempt.stop == "end_turn":
                return attempt
            await asyncio.sleep(pause)
        return None


def text_of(frames: list[Frame], message_id: str) -> str:
    return "".join(f["content"] for f in frames if f["type"] == "content_chunk" and f.get("messageId") == message_id)
