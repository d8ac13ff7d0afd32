"""Many conversations streaming at once on real server instances: the load a chaos case puts
its fault under, and what the cases share (the model's answers, waiting until all is quiet).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.chaos.recorder import Attempt, Sock, Talk
from tests.conftest import SMALL_MODEL
from tests.fakes.anthropic_fake import Reply
from tests.support import ServerProcess

LONG = "long"  # a message that starts so gets a long streamed reply
WORDS = 300  # words of a long reply: 5 characters each, one SSE event each


def last_user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return " ".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def reply_for(body: dict[str, Any], delay: float) -> Reply:
    """A long reply (WORDS words, `delay` s apart) to a message starting with LONG, else a
    short one; titles get a short one too."""
    if body.get("model") == SMALL_MODEL:
        return Reply("A title")
    asked = last_user_text(body)
    if asked.startswith(LONG):
        return Reply("word " * WORDS, chunk_size=5, delay=delay)
    return Reply(f"ok: {asked[:40]}", chunk_size=4)


@contextmanager
def answering(fake: Any, delay: float = 0.05) -> Iterator[None]:
    fake.responder = lambda body: reply_for(body, delay)
    try:
        yield
    finally:
        fake.responder = None


@dataclass
class Fleet:
    """Conversations, each with a person talking on one instance and someone watching on another."""

    servers: list[ServerProcess]
    talks: list[Talk] = field(default_factory=list)
    socks: list[Sock] = field(default_factory=list)

    async def open(self, n: int, *, watchers: bool = True) -> None:
        """n conversations, the i-th talked to on instance i % len(servers); each gets its first
        (long) message, and then a watcher on the next instance."""
        count = len(self.servers)
        socks = await asyncio.gather(*(Sock.open(f"c{i}", self.servers, i % count) for i in range(n)))
        self.socks += socks
        self.talks = [Talk(sock, self.servers, self.socks) for sock in socks]
        for talk in self.talks:
            await talk.sock.send(type="message", content=f"{LONG} first of {talk.sock.name}")
        # The conversation is stored with its first message: a watcher elsewhere finds it then.
        await asyncio.gather(*(t.sock.wait(lambda f: f["type"] == "content_chunk", timeout=60) for t in self.talks))
        if watchers:  # (on the same instance when there is one)
            self.socks += await asyncio.gather(*(
                Sock.open(f"w{i}", self.servers, (i + 1) % count, t.sock.conversation)
                for i, t in enumerate(self.talks)))

    async def first_turns_done(self, timeout: float) -> list[float]:
        """Waits for the `done` of each first turn; when each came (monotonic)."""
        found = await asyncio.gather(*(t.sock.wait(lambda f: f["type"] == "done", timeout=timeout)
                                       for t in self.talks))
        return [t.sock.frames[i].at for t, (i, _) in zip(self.talks, found)]

    async def quiet(self, still: float = 2.0, timeout: float = 60.0) -> None:
        """Waits until no socket got a frame for `still` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            last = max((s.frames[-1].at for s in self.socks if s.frames), default=0.0)
            if time.monotonic() - last >= still:
                return
            await asyncio.sleep(0.2)

    @property
    def conversations(self) -> list[str]:
        return [t.sock.conversation for t in self.talks]

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self.socks), return_exceptions=True)


async def during_outage(talk: Talk, speaks: bool, until: float) -> None:
    """While the store is away: waits for the end of the reply (it goes on from memory); then,
    if `speaks` and the store is still away, sends one more message and waits for whatever
    comes of it, as people do while nothing seems wrong."""
    try:
        await talk.sock.wait(lambda f: f["type"] == "done", timeout=120)
    except (TimeoutError, EOFError):
        return
    if speaks and time.monotonic() < until - 1:
        await talk.ask(f"{LONG} during the outage", timeout=120)


@dataclass
class Outage:
    """When the store went away and came back (monotonic), for the people waiting it out."""

    ends_at: float  # as planned
    back: asyncio.Event = field(default_factory=asyncio.Event)
    back_at: float = 0.0

    def over(self) -> None:
        self.back_at = time.monotonic()
        self.back.set()


async def ride_out(talk: Talk, speaks: bool, outage: Outage, within: float) -> float | None:
    """A person through an outage (`during_outage`), then after it (`usable_after`): the
    seconds it took the conversation to take a new turn, or None."""
    await during_outage(talk, speaks, outage.ends_at)
    await outage.back.wait()
    return await usable_after(talk, outage.back_at, within)


async def usable_after(talk: Talk, back_at: float, within: float) -> float | None:
    """Seconds from the store's return (or from the end of the client's last turn, if later)
    until a new message was answered by a turn; None if none was (the bound + 30 s given)."""
    since = back_at
    if talk.attempts and talk.attempts[-1].done_at is not None:
        since = max(since, talk.attempts[-1].done_at)
    elif not talk.attempts:
        since = max(since, next((s.at for s in talk.sock.frames if s.frame["type"] == "done"), time.monotonic()))
    attempt: Attempt | None = await talk.until_taken("after the outage", deadline=since + within + 30)
    if attempt is None or attempt.first_frame_at is None:
        return None
    return attempt.first_frame_at - since


def timeline(talks: list[Talk], zero: float) -> str:
    """Each person's messages: outcome and times (s from `zero`), for a report."""
    def at(t: float | None) -> str:
        return "-" if t is None else f"{t - zero:+.1f}"

    lines = []
    for talk in talks:
        steps = [f"{a.outcome}{'/' + a.code if a.code else ''}{'/' + a.stop if a.stop else ''} sent {at(a.sent_at)} "
                 f"first {at(a.first_frame_at)} done {at(a.done_at)}" for a in talk.attempts]
        lines.append(f"{talk.sock.name}: " + "; ".join(steps))
    return "\n".join(lines)
