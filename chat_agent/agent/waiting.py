"""A model call as its user lives it: told while it is silent, given up once it stays so.

The call's stream runs in a task of its own, every step of it in that one task (as the SDKs
and their HTTP clients expect), and hands its items over; the caller waits for the next item
or for a clock, whichever comes first. So it can say "still waiting" at a steady pace while
the model has sent nothing (`ModelWaiting`), and end the call with an error once the model
has sent nothing for `idle` seconds, before its first item or between two. A `Retry` of the
client is told as `ModelRetrying`; the wait it announces is not silence.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from contextlib import aclosing
from typing import AsyncIterator, Union

from chat_agent.agent.events import ModelRetrying, ModelWaiting
from chat_agent.model import LLMError, Retry, StreamItem, TextDelta, ThinkingDelta, ToolInputDelta
from chat_agent.urgency import Hold, Urgency

log = logging.getLogger(__name__)

IDLE_ERROR = "The model API sent nothing for {idle:g} s, so the call was given up (CHAT_AGENT_MODEL_IDLE_TIMEOUT)."
BUFFER = 256  # items the stream may run ahead of its caller before it waits
_TIMEOUT, _END = object(), object()

Watched = Union[StreamItem, ModelWaiting, ModelRetrying]


def _wake(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


def _merged(items: deque[StreamItem]) -> StreamItem:
    """The next item, with the deltas of the same kind that follow it joined to it (text,
    thinking, one tool call's input): a reply that came in a burst is handed up in a few
    pieces, not one per event through every layer above (the frames merge them anyway,
    `sessions/coalesce.py`)."""
    item = items.popleft()
    if not items or type(items[0]) is not type(item):
        return item
    if isinstance(item, (TextDelta, ThinkingDelta)):
        texts = [item.text]
        while items and type(items[0]) is type(item):
            texts.append(items.popleft().text)  # type: ignore[union-attr]
        return type(item)("".join(texts))
    if isinstance(item, ToolInputDelta):
        pieces = [item.piece]
        while items and isinstance(items[0], ToolInputDelta) and items[0].tool_id == item.tool_id:
            pieces.append(items.popleft().piece)  # type: ignore[union-attr]
        return ToolInputDelta(item.tool_id, item.name, "".join(pieces))
    return item


class _Relay:
    """A stream run by a task of its own; `next(deadline)` is its next item, `_END` after the
    last, `_TIMEOUT` when the deadline came first. The stream's error is raised by `next`
    once the items before it were taken."""

    def __init__(self, stream: AsyncIterator[StreamItem], urgency: Urgency | None = None):
        self._loop = asyncio.get_running_loop()
        self._items: deque[StreamItem] = deque()
        self._ended = False
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None  # the caller, waiting for an item
        self._room: asyncio.Future[None] | None = None  # the stream, waiting for the caller to take some
        self._urgency = urgency
        self._first = Hold(urgency)  # the first item waits for the caller: other streams pause
        self._task = self._loop.create_task(self._pump(stream), name="model-call")

    async def _pump(self, stream: AsyncIterator[StreamItem]) -> None:
        urgency = self._urgency
        first = True
        try:
            if urgency is not None and urgency.stopping:
                await urgency.pause_for_stops()  # sending a request takes a few ms of the loop too
            async with aclosing(stream) as items:  # type: ignore[type-var]
                async for item in items:
                    self._items.append(item)
                    _wake(self._waiter)
                    if first:
                        # The caller takes the first item before this stream goes on: a reply
                        # that came in a burst would otherwise be read for a whole share of the
                        # loop (model/fair.py) before its first text is on its way, behind the
                        # shares of every other stream that is ready. Other streams pause
                        # until it has (`next`), so that its hop meets a short queue.
                        first = False
                        self._first.take()
                        await asyncio.sleep(0)
                    if urgency is not None and urgency.pending:
                        await urgency.pause()  # an abort, say, goes first (chat_agent/urgency.py)
                    if len(self._items) >= BUFFER:
                        self._room = self._loop.create_future()
                        await self._room
        except Exception as exc:  # the caller raises it; cancellation passes through
            self._error = exc
        finally:
            self._ended = True
            self._first.release()
            _wake(self._waiter)

    async def next(self, deadline: float) -> object:
        while not self._items and not self._ended:
            if self._loop.time() >= deadline:
                return _TIMEOUT
            self._waiter = self._loop.create_future()
            timer = self._loop.call_at(deadline, _wake, self._waiter)
            try:
                await self._waiter
            finally:
                timer.cancel()
                self._waiter = None
        if self._items and not self._first.held and self._urgency is not None and self._urgency.pending:
            # Items taken run the turn on without a pause otherwise. Only once they are here:
            # paused before, a caller whose first item came meanwhile would hold the urgency
            # itself (`_first`) and wait out the longest pause.
            await self._urgency.pause()
        if self._items:
            _wake(self._room)
            self._first.release()  # (the first item is taken)
            return _merged(self._items)
        if self._error is not None:
            raise self._error
        return _END

    async def close(self) -> None:
        """Stops the stream (closing its HTTP response) and waits until it has."""
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    def stop(self) -> None:
        """Stops the stream without waiting: it closes its response in its own time. What
        an abort uses, since each await on its way to `done` waits for every other ready
        task once, and closing a response takes several (tens of ms each on a busy loop)."""
        self._task.cancel()


async def watched(stream: AsyncIterator[StreamItem], *, every: float, idle: float,
                  urgency: Urgency | None = None) -> AsyncIterator[Watched]:
    """Yields what `stream` yields, a `ModelWaiting` every `every` seconds until its first
    item, and a `ModelRetrying` for each `Retry`. Raises LLMError when it yields nothing for
    `idle` seconds (a retry's announced wait not counted)."""
    loop = asyncio.get_running_loop()
    relay = _Relay(stream, urgency)
    started = loop.time()
    tick: float | None = started + every  # the next "still waiting"; None once something came
    quiet_until = started + idle
    stopped = False
    try:
        while True:
            item = await relay.next(quiet_until if tick is None else min(tick, quiet_until))
            now = loop.time()
            if item is _END:
                return
            if item is _TIMEOUT and now >= quiet_until:
                log.warning("the model sent nothing for %g s; giving the call up", idle)
                raise LLMError("llm_error", IDLE_ERROR.format(idle=idle))
            if item is _TIMEOUT:
                assert tick is not None
                yield ModelWaiting(now - started)
                while tick <= loop.time():  # a steady pace from the call's start, whatever the delays
                    tick += every
            elif isinstance(item, Retry):
                yield ModelRetrying(item.attempt, item.attempts, item.reason, item.delay, now - started)
                quiet_until = loop.time() + item.delay + idle
            else:
                tick = None
                yield item  # type: ignore[misc]
                quiet_until = loop.time() + idle
    except asyncio.CancelledError:
        relay.stop()  # an abort: `done` must not wait for the response to close
        stopped = True
        raise
    finally:
        if not stopped:
            await relay.close()
