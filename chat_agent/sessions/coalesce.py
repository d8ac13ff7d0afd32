"""Coalescing of streamed deltas: one frame per ~50 ms of a stream, not one per model delta.

The model sends text in pieces of a few characters, often hundreds of them in a burst.
Giving each its own frame, its own event row and its own commit is what made a busy
server deliver a reply in one lump at the end of the turn. The first delta after a quiet
spell goes out at once (the first token is never held); the ones that follow within the
window are merged and go out when it ends, or as soon as any other frame of the
conversation is published, so frames keep their order.

Merged frames are the frames: the event log stores exactly what clients were sent, so
`resume` replays the same text under the same seqs.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from chat_agent.protocol import ArtifactChunk, ContentChunk, ServerFrame, ThinkingChunk

WINDOW = 0.05  # seconds: below what a reader notices, ~20 frames a second at most per stream

Delta = ContentChunk | ThinkingChunk | ArtifactChunk
DELTAS = (ContentChunk, ThinkingChunk, ArtifactChunk)


def _key(frame: Delta) -> tuple[str, str]:
    return frame.type, frame.tool_id if isinstance(frame, ArtifactChunk) else frame.message_id


class DeltaCoalescer:
    """Holds at most one pending delta frame; `emit` gives frames their seq and sends them."""

    def __init__(self, emit: Callable[[ServerFrame], None], window: float = WINDOW):
        self._emit = emit
        self._window = window
        self._pending: Delta | None = None
        self._parts: list[str] = []
        self._last = -window  # when a delta last went out
        self._timer: asyncio.TimerHandle | None = None

    def offer(self, frame: Delta) -> None:
        if self._pending is not None:
            if _key(self._pending) == _key(frame):
                self._parts.append(frame.content)
                return
            self.flush()
        now = asyncio.get_running_loop().time()
        if now - self._last >= self._window:
            self._last = now
            self._emit(frame)
            return
        self._pending, self._parts = frame, [frame.content]
        self._timer = asyncio.get_running_loop().call_later(self._last + self._window - now, self.flush)

    def interrupt(self) -> None:
        """Another frame comes: the held delta goes first, and the deltas after that frame
        start a new run (the first of them goes out at once, like a new turn's first token)."""
        self.flush()
        self._last = -self._window

    def flush(self) -> None:
        """Sends the pending delta now (when its window ends, or before another frame)."""
        pending, self._pending = self._pending, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if pending is None:
            return
        if len(self._parts) > 1:
            pending = pending.model_copy(update={"content": "".join(self._parts)})
        self._parts = []
        self._last = asyncio.get_running_loop().time()
        self._emit(pending)
