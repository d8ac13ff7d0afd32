"""Deliberate bugs, to show that the checker catches what it claims to (`--bug NAME`).

Each is installed by the simulation into one instance's hub as it is composed: every
conversation that instance opens gets a subclass of the real `LiveConversation` that breaks
one rule, or the hub's continuation of cut turns does. Nothing of this is in the product.
"""

from __future__ import annotations

from typing import Any, Sequence

from chat_agent.protocol import ContentChunk, ContextUpdate, Done, ServerFrame
from chat_agent.sessions.hub import Hub
from chat_agent.sessions.live import LiveConversation
from chat_agent.store import Op


class SendBeforeStore(LiveConversation):
    """Hands every frame to the listeners as soon as it is numbered, before it is stored."""

    def publish(self, frame: ServerFrame, ops: Sequence[Op] = ()) -> None:
        super().publish(frame, ops)
        self.show_uncommitted()


class SkipStore(LiveConversation):
    """Numbers `context_update` frames and sends them, without storing them."""

    def publish(self, frame: ServerFrame, ops: Sequence[Op] = ()) -> None:
        if not isinstance(frame, ContextUpdate) or ops:
            super().publish(frame, ops)
            return
        self.flush_deltas()
        self._seq += 1
        frame.conversation_id, frame.seq = self.id, self._seq
        self._shown = self._seq
        self.deliver(self._seq, frame.to_json())


class AfterDone(LiveConversation):
    """Publishes one more piece of the reply after each `done`."""

    def publish(self, frame: ServerFrame, ops: Sequence[Op] = ()) -> None:
        super().publish(frame, ops)
        if isinstance(frame, Done):
            super().publish(ContentChunk(message_id=frame.message_id, content=" (late)"))


BUGS: dict[str, type[LiveConversation]] = {
    "send-before-store": SendBeforeStore,
    "skip-store": SkipStore,
    "after-done": AfterDone,
}


def rerun_unsafe(hub: Hub) -> None:
    """A turn continued after a failure runs every call that was running again, safe or not."""
    hub.registry._resumer.repeatable = lambda name: True  # type: ignore[union-attr, method-assign]


def urgent_alone(hub: Hub) -> None:
    """The writer's urgent lane takes an urgent frame ahead without its conversation's earlier
    frames (which the lane must take along: a conversation's frames are stored in seq order)."""
    writer = hub.writer

    def take(round_: Any) -> list[Any]:
        writer._urgent = False
        taken = [s for chunk in round_.chunks for s in chunk if s.urgent] + [s for s in writer._queue if s.urgent]
        round_.chunks = [kept for chunk in round_.chunks if (kept := [s for s in chunk if not s.urgent])]
        writer._queue = [s for s in writer._queue if not s.urgent]
        return taken

    writer._take_urgent = take  # type: ignore[method-assign]


HUB_BUGS = {"rerun-unsafe": rerun_unsafe, "urgent-alone": urgent_alone}


class Bugs:
    def __init__(self, name: str | None):
        if name is not None and name not in BUGS and name not in HUB_BUGS:
            raise ValueError(f"unknown bug {name!r}; known: {', '.join([*BUGS, *HUB_BUGS])}")
        self.name = name

    def install(self, hub: Hub) -> None:
        if self.name is None:
            return
        if self.name in HUB_BUGS:
            HUB_BUGS[self.name](hub)
            return
        kind = BUGS[self.name]
        registry = hub.registry
        remember = registry._remember

        def bugged(*args: Any) -> LiveConversation:
            live = remember(*args)
            live.__class__ = kind
            return live

        registry._remember = bugged  # type: ignore[method-assign]
