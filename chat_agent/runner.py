"""One turn as a task owned by its conversation, not by any socket.

It turns the loop's events into frames, and whatever ends the turn (the model stopping, an
error, abort, shutdown), it closes every open tool card, sends `done`, and stores the reply.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from contextlib import aclosing
from typing import Callable

from .events import (ArtifactDelta, ContextChanged, Event, TextDelta, ThinkingDelta, ToolEnded,
                     ToolProgressed, ToolStarted, TurnFailed, TurnFinished)
from .fold import open_tools
from .live import LiveConversation
from .loop import CANCELLED_RESULT, STOPPED_NOTE, Agent, Turn, run_turn
from .protocol import (ArtifactChunk, ContentChunk, ContextUpdate, Done, ErrorFrame, ServerFrame, ThinkingChunk,
                       ToolEnd, ToolProgress, ToolStart, Usage, VisibleMessage)
from .store import FinishTurn, PruneEvents, StartTurn, TurnRecord

log = logging.getLogger(__name__)

KEEP_TURNS = 3  # turns whose frames stay in the event log for `resume`
_TURN_STATUS = {"aborted": "aborted", "error": "error"}


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


class TurnRunner:
    def __init__(self, live: LiveConversation, agent: Agent, turn: Turn, *,
                 turn_id: str | None = None, message_id: str | None = None):
        self.live = live
        self.agent = agent
        self.turn = turn
        self.turn_id = turn_id or new_id("turn")
        self.message_id = message_id or new_id("msg")
        self._tool_started: dict[str, float] = {}
        self._artifact_changes = live.canvas.changes
        self.task: asyncio.Task[None] | None = None
        self.after: Callable[[TurnRunner, str], None] | None = None  # called once the turn has ended

    def start(self, user_message: VisibleMessage, model_content: list[dict]) -> None:
        live, now = self.live, time.time()
        live.manager.add_visible(user_message)
        live.manager.add_user(model_content)
        self.turn.start = len(live.manager.messages) - 1
        first_seq = live.seq + 1
        ops = [StartTurn(TurnRecord(id=self.turn_id, conversation_id=live.id, owner=live.owner,
                                    message_id=self.message_id, status="running", started_at=now,
                                    first_seq=first_seq))]
        live.turn_starts.append(first_seq)
        if len(live.turn_starts) > KEEP_TURNS:
            ops.append(PruneEvents(live.owner, live.id, live.turn_starts.pop(0)))
        live.writer.submit(ops)
        live.reply = VisibleMessage(id=self.message_id, role="assistant", created_at=now, status="streaming")
        live.runner = self
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"turn:{live.id}")

    @property
    def artifact_changed(self) -> bool:
        return self.live.canvas.changes != self._artifact_changes

    async def abort(self) -> None:
        """Cancels the turn and waits until `done` has been published."""
        task = self.task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        stop = "error"
        try:
            async with aclosing(run_turn(self.agent, self.live.manager, self.turn)) as events:
                async for event in events:
                    if isinstance(event, TurnFinished):
                        stop = event.stop_reason
                    else:
                        self._emit(event)
        except asyncio.CancelledError:
            stop = "aborted"
        except Exception:
            log.exception("turn %s failed", self.turn_id)
            self.publish(ErrorFrame(code="internal", message="Something went wrong on the server; the turn stopped."))
        finally:
            if stop in ("aborted", "error"):
                # The loop keeps the history valid itself; this covers a stop it never saw
                # (e.g. between steps) and does nothing when the history already ends well.
                self.live.manager.repair("", STOPPED_NOTE, CANCELLED_RESULT)
            self.finish(stop)

    def _emit(self, event: Event) -> None:
        match event:
            case TextDelta(text=text):
                self.publish(ContentChunk(message_id=self.message_id, content=text))
            case ThinkingDelta(text=text):
                self.publish(ThinkingChunk(message_id=self.message_id, content=text))
            case ArtifactDelta(tool_id=tool_id, text=text):
                self.publish(ArtifactChunk(tool_id=tool_id, content=text))
            case ToolStarted(tool_id=tool_id, name=name, input=tool_input):
                self._tool_started[tool_id] = time.monotonic()
                self.publish(ToolStart(message_id=self.message_id, tool_id=tool_id, name=name, input=tool_input))
            case ToolProgressed(tool_id=tool_id, elapsed=elapsed, status=status):
                self.publish(ToolProgress(tool_id=tool_id, elapsed=round(elapsed, 3), status=status))
            case ToolEnded(tool_id=tool_id, name=name, output=output, duration=duration, is_error=is_error):
                self._tool_started.pop(tool_id, None)
                self.publish(ToolEnd(tool_id=tool_id, name=name, output=output,
                                      duration=round(duration, 3), is_error=is_error))
            case ContextChanged(tokens=tokens, max_tokens=max_tokens, summarized=summarized):
                self.publish(ContextUpdate(tokens=tokens, max_tokens=max_tokens, summarized=summarized))
            case TurnFailed(code=code, message=message):
                self.publish(ErrorFrame(code=code, message=message))

    def publish(self, frame: ServerFrame, ops=()) -> None:
        self.live.publish(frame, self.turn_id, ops)

    def finish(self, stop: str, *, status: str | None = None) -> None:
        """Closes open tool cards, stores the reply and publishes `done`. Synchronous, so
        nothing can interleave between the reply leaving `live.reply` and the history."""
        live = self.live
        reply = live.reply
        now = time.monotonic()
        for call in open_tools(reply) if reply is not None else []:
            started = self._tool_started.pop(call.tool_id, now)
            self.publish(ToolEnd(tool_id=call.tool_id, name=call.name, output="Cancelled before it finished.",
                                  duration=round(now - started, 3), is_error=True))
        usage = self.turn.usage
        status = status or _TURN_STATUS.get(stop, "complete")
        if reply is not None:
            reply.status = "complete" if status == "complete" else status
            live.manager.replace_visible(reply)
        done = Done(message_id=self.message_id, stop_reason=stop, usage=Usage(
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens, cache_write_tokens=usage.cache_write_tokens))
        self.publish(done, [FinishTurn(live.owner, live.id, self.turn_id, status, stop,
                                        {"inputTokens": usage.input_tokens, "outputTokens": usage.output_tokens,
                                         "cacheReadTokens": usage.cache_read_tokens,
                                         "cacheWriteTokens": usage.cache_write_tokens}, time.time())])
        live.reply = None
        live.runner = None
        if self.after is not None:
            try:
                self.after(self, stop)
            except Exception:
                log.exception("after-turn hook failed")
