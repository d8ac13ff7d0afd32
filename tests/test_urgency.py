"""Urgent work ahead of streaming (chat_agent/urgency.py): a model stream, as the loop
watches it (`agent/waiting.py`), stops taking items while urgent work is under way and goes
on after it; a pause is bounded; an aborted call does not wait for its response to close.
The stream is a plain async generator standing for a model client's: a reply the server
has buffered, an item at every turn of the event loop until told to end."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import AsyncIterator

from chat_agent.agent.waiting import watched
from chat_agent.model import TextDelta
from chat_agent.urgency import LONGEST_PAUSE, Urgency
from tests.cancelling import cancel_within
from tests.support import polled


@dataclass
class Stream:
    close_takes: float = 0.0  # a response that takes a while to close
    taken: int = 0
    ended: bool = False
    closed: list[bool] = field(default_factory=list)

    async def items(self) -> AsyncIterator[TextDelta]:
        try:
            i = 0
            while not self.ended:
                yield TextDelta(f"w{i} ")
                i += 1
                await asyncio.sleep(0)
        finally:
            if self.close_takes:
                await asyncio.sleep(self.close_takes)
            self.closed.append(True)

    async def consume(self, urgency: Urgency) -> None:
        async with aclosing(watched(self.items(), every=60, idle=60, urgency=urgency)) as items:
            async for _ in items:
                self.taken += 1


async def test_streams_wait_while_urgent_work_is_under_way_and_go_on_after():
    urgency, stream = Urgency(), Stream()
    task = asyncio.create_task(stream.consume(urgency))
    await polled(lambda: stream.taken >= 20, 10)
    with urgency.first():
        for _ in range(3):  # what was in flight lands
            await asyncio.sleep(0)
        before = stream.taken
        for _ in range(200):  # urgent work's own steps: the stream would take an item at each
            await asyncio.sleep(0)
        assert stream.taken - before <= 2, f"the stream took {stream.taken - before} items while urgent work ran"
    after = stream.taken
    await polled(lambda: stream.taken >= after + 100, 10)
    stream.ended = True
    await asyncio.wait_for(task, 30)
    assert stream.closed


async def test_a_pause_is_bounded():
    urgency, stream = Urgency(), Stream()
    task = asyncio.create_task(stream.consume(urgency))
    await polled(lambda: stream.taken >= 20, 10)
    with urgency.first():  # urgent work that does not end soon
        for _ in range(3):
            await asyncio.sleep(0)
        before = stream.taken
        await asyncio.sleep(LONGEST_PAUSE * 5)
        moved = stream.taken - before
    assert 1 <= moved <= 50, f"{moved} items in {LONGEST_PAUSE * 5:g} s of urgent work (about 5 expected)"
    stream.ended = True
    await asyncio.wait_for(task, 30)


async def test_an_aborted_call_does_not_wait_for_its_response_to_close():
    urgency, stream = Urgency(), Stream(close_takes=0.5)
    task = asyncio.create_task(stream.consume(urgency))
    await polled(lambda: stream.taken >= 20, 10)
    await cancel_within(task, 0.3)
    assert not stream.closed, "the abort waited for the response to close"
    await polled(lambda: stream.closed, 10)  # it still closes, in its own time


def _call(urgency: Urgency, started: list[bool]) -> asyncio.Task[list[object]]:
    async def call() -> AsyncIterator[TextDelta]:
        started.append(True)
        yield TextDelta("hello")

    async def consume() -> list[object]:
        async with aclosing(watched(call(), every=60, idle=60, urgency=urgency)) as items:
            return [item async for item in items]

    return asyncio.create_task(consume())


async def test_a_model_call_about_to_start_waits_while_an_abort_is_under_way():
    """Sending a request takes a few ms of the event loop too: a call that would start while
    an abort unwinds waits (bounded), then starts."""
    urgency = Urgency(longest=30.0)  # only the end of the abort lets it go here
    started: list[bool] = []
    with urgency.first(stop=True):
        task = _call(urgency, started)
        for _ in range(50):
            await asyncio.sleep(0)
        assert not started, "the call started while an abort was under way"
    assert [getattr(item, "text", None) for item in await asyncio.wait_for(task, 10)] == ["hello"]
    assert started


async def test_a_model_call_about_to_start_does_not_wait_for_other_urgent_work():
    """Another turn's first text or `done` on its way to its commit is urgent too, but a
    request held back for it holds back a first text further off than its own: when many
    turns start at once, each would wait for those that started before it."""
    urgency = Urgency(longest=30.0)
    started: list[bool] = []
    with urgency.first():
        task = _call(urgency, started)
        for _ in range(50):
            await asyncio.sleep(0)
            if started:
                break
        assert started, "the call waited for urgent work that is not an abort"
    await asyncio.wait_for(task, 10)


async def test_a_first_item_waiting_for_its_caller_pauses_the_other_streams():
    """A turn's first text goes through several hops (the turn's task, the writer, the
    socket), each a pass of the loop: while it waits for its caller (here busy telling the
    client it still waits), the other streams pause instead of taking their shares."""
    urgency, other = Urgency(longest=30.0), Stream()
    task = asyncio.create_task(other.consume(urgency))
    await polled(lambda: other.taken >= 20, 10)
    came: list[int] = []

    async def call() -> AsyncIterator[TextDelta]:
        await asyncio.sleep(0.05)
        came.append(other.taken)
        yield TextDelta("first")

    async with aclosing(watched(call(), every=0.01, idle=60, urgency=urgency)) as items:
        item = await anext(items)
        while not hasattr(item, "text"):
            for _ in range(200):  # the caller's own steps, as after a "still waiting"
                await asyncio.sleep(0)
            item = await anext(items)
        taken_at = other.taken
        assert [] == [item async for item in items]
    assert not urgency.pending
    assert taken_at - came[0] <= 3, f"the other stream took {taken_at - came[0]} items while the first one waited"
    other.ended = True
    await asyncio.wait_for(task, 30)


async def test_a_first_item_is_taken_at_once_while_other_urgent_work_goes_on():
    """A caller already waiting when its first item comes takes it at once, whatever other
    urgent work is under way: its first text is urgent too. (Paused for the other work while
    it waited, it held the urgency itself once its item came, and waited out the longest
    pause.)"""
    urgency = Urgency(longest=30.0)
    came = asyncio.Event()

    async def call() -> AsyncIterator[TextDelta]:
        await came.wait()
        yield TextDelta("first")

    with urgency.first():  # another turn's `done` on its way to its commit, say
        async with aclosing(watched(call(), every=60, idle=60, urgency=urgency)) as items:
            waiting = asyncio.ensure_future(anext(items))
            for _ in range(5):  # the caller waits for its first item
                await asyncio.sleep(0)
            came.set()
            item = await asyncio.wait_for(waiting, 5)
    assert getattr(item, "text", None) == "first"
