"""Progress reports of one running tool, with a heartbeat that fills the silences."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Callable

logger = logging.getLogger("chat_agent.tools")

ProgressSink = Callable[[str, float, str], None]  # (tool_id, elapsed_seconds, status)


class Pulse:
    """Forwards `ToolContext.progress` to the sink and repeats the last status
    whenever a tool has been silent for `interval` seconds.

    The heartbeat is a timer handle on the loop rather than a task: it costs one
    `call_at` per run (a task would cost several times the whole fast path) and
    `stop()` is synchronous, so nothing can outlive the call.
    """

    __slots__ = ("_tool_id", "_sink", "_interval", "_loop", "_thread", "_started", "_last", "_status", "_timer")

    def __init__(self, tool_id: str, sink: ProgressSink, interval: float, loop: asyncio.AbstractEventLoop) -> None:
        self._tool_id = tool_id
        self._sink: ProgressSink | None = sink
        self._interval = interval
        self._loop = loop
        self._thread = threading.get_ident()
        self._started = self._last = loop.time()
        self._status = "running"
        self._timer: asyncio.TimerHandle | None = loop.call_at(self._started + interval, self._beat)

    def report(self, status: str) -> None:
        if threading.get_ident() == self._thread:
            self._emit(status)
            return
        try:  # a sync tool in a worker thread: the sink belongs to the loop
            self._loop.call_soon_threadsafe(self._emit, status)
        except RuntimeError:  # the loop is gone; the call ended long ago
            pass

    def stop(self) -> None:
        self._sink = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _emit(self, status: str) -> None:
        sink = self._sink
        if sink is None:  # a report after the call ended (a thread still running)
            return
        now = self._loop.time()
        self._status, self._last = status, now
        try:
            sink(self._tool_id, now - self._started, status)
        except Exception:  # a broken listener must not fail the tool
            logger.exception("on_progress failed for tool call %s", self._tool_id)

    def _beat(self) -> None:
        if self._sink is None:
            return
        if self._loop.time() - self._last >= self._interval:
            self._emit(self._status)
        self._timer = self._loop.call_at(self._last + self._interval, self._beat)
