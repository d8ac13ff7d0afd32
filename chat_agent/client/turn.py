"""One turn seen from the client: read frames until the turn's `done`, decide how it ended.

Kept apart from the socket so the rules (which errors end a turn, which are followed by a
`done`) are tested by feeding frames, not by running a server.
"""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable

from pydantic import Field

from chat_agent.protocol import AnyServerFrame, ContentChunk, Done, ErrorFrame, ThinkingChunk

from .errors import ChatError

# Errors that answer the `message` itself: the turn never started, so no `done` will follow.
REJECTIONS = frozenset({"invalid_frame", "unknown_type", "empty_message", "too_large", "busy",
                        "not_found", "unauthorized", "invalid_highlight", "no_artifact"})
# Errors after which the turn still ends normally, with a `done` (stopReason `error`).
SOFT_ERRORS = frozenset({"llm_error", "rate_limited"})

OnFrame = Callable[[AnyServerFrame], "Awaitable[None] | None"]
Receive = Callable[[float | None], Awaitable[AnyServerFrame]]


class TurnDone(Done):
    """The turn's `done` frame plus what the client gathered on the way.

    Still a `Done` (isinstance holds, `stop_reason` and `usage` are there); `error` is the
    `llm_error`/`rate_limited` frame that preceded it, if any.
    """

    error: ErrorFrame | None = None
    text: str = ""
    thinking: str = ""
    frames: list[Any] = Field(default_factory=list, exclude=True, repr=False)


async def collect_turn(receive: Receive, on_frame: OnFrame | None = None,
                       error_grace: float = 10.0) -> TurnDone:
    """Read until the turn's `done`. Raises ChatError for an error that belongs to the turn.

    After a turn error that is not a rejection, keep reading (up to `error_grace` seconds) for
    the `done` that may follow, so it is not left queued to end the *next* turn early.
    """
    frames: list[AnyServerFrame] = []
    error: ErrorFrame | None = None
    while True:
        try:
            frame = await receive(error_grace if error else None)
        except TimeoutError:
            assert error is not None  # only the grace wait has a timeout
            raise ChatError(error) from None
        frames.append(frame)
        if on_frame is not None:
            result = on_frame(frame)
            if inspect.isawaitable(result):
                await result
        if isinstance(frame, ErrorFrame) and error is None:
            if frame.code in REJECTIONS:
                raise ChatError(frame)
            error = frame
        elif isinstance(frame, Done):
            if error is not None and error.code not in SOFT_ERRORS:
                raise ChatError(error, done=frame)
            return finish_turn(frame, frames, error)


def finish_turn(done: Done, frames: list[AnyServerFrame], error: ErrorFrame | None) -> TurnDone:
    text = "".join(f.content for f in frames if isinstance(f, ContentChunk))
    thinking = "".join(f.content for f in frames if isinstance(f, ThinkingChunk))
    return TurnDone(**dict(done), error=error, text=text, thinking=thinking, frames=frames)
