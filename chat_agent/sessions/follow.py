"""A conversation owned by another instance, followed here: the frames its owner committed
(the bus brings them) go to this instance's sockets in seq order, and what the bus lost is
read from the event log first.

Only committed frames travel on the bus, so a follower never shows what the store does not
hold. It knows whether the owner runs a turn from the frames it sees: a turn's frames carry
its id, and its `done` ends it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Callable

from chat_agent.sessions.messages import Committed
from chat_agent.store import Store

log = logging.getLogger(__name__)

UNKNOWN_TURN = "?"  # a turn runs, as the store said on opening; its id comes with its frames


class Follower:
    def __init__(self, user: str, conversation_id: str, store: Store, deliver: Callable[[int, str], None], seq: int,
                 *, running: bool, missed: Callable[[], None]):
        self.user = user
        self.conversation_id = conversation_id
        self._store = store
        self._deliver = deliver
        self._missed = missed  # told when frames the listeners did not get are gone from the log
        self.seq = seq  # the last seq delivered here
        self.turn: str | None = UNKNOWN_TURN if running else None  # the owner's running turn
        self.instance: str | None = None  # the owner, as the last frames said
        # Made when frames come and dropped once drained: an idle follower holds ~nothing.
        self._incoming: deque[Committed] | None = None
        self._gap: asyncio.Task[None] | None = None
        self._ended: deque[str] = deque(maxlen=16)  # the last turns whose `done` was delivered

    @property
    def running(self) -> bool:
        return self.turn is not None

    def shows_status(self, turn: str | None) -> bool:
        """Whether a `status` of the owner's turn `turn` goes to the listeners here: not one of
        a turn whose `done` they were given (a status may overtake frames on the bus), nor
        one of another turn than the one followed; one of a turn that has sent no frame yet
        (waiting for the model) does."""
        if turn is None or turn in self._ended:
            return False
        return self.turn in (turn, UNKNOWN_TURN, None)

    def arrived(self, frames: list[Committed], instance: str | None = None) -> None:
        """Frames the owner committed, as the bus brings them: delivered in seq order, a gap
        filled from the event log first."""
        if instance is not None:
            self.instance = instance
        if self._incoming is None:
            self._incoming = deque()
        self._incoming.extend(frames)
        if self._gap is None:
            self._drain()

    def catch_up(self) -> None:
        """Reads what the bus may have lost (it reconnected) from the event log."""
        if self._gap is None:
            self._gap = asyncio.get_running_loop().create_task(self._read_gap(), name=f"catch-up:{self.conversation_id}")

    def doubt(self) -> None:
        """The owner the frames named does not answer (it may have died before its last frames
        reached this instance): whether a turn runs is what the log says from here on."""
        self.turn, self.instance = None, None
        self.catch_up()

    def stop(self) -> None:
        """The conversation is owned here now, or let go: nothing more is followed."""
        if self._gap is not None:
            self._gap.cancel()
            self._gap = None
        self._incoming = None

    def _drain(self) -> None:
        while self._incoming:
            seq, turn_id, kind, text = self._incoming[0]
            if seq > self.seq + 1:
                self.catch_up()
                return
            self._incoming.popleft()
            if seq == self.seq + 1:
                self._one(seq, turn_id, kind, text)
        self._incoming = None

    def _one(self, seq: int, turn_id: str | None, kind: str, text: str) -> None:
        self.seq = seq
        if kind == "done":
            self.turn = None
            if turn_id is not None:
                self._ended.append(turn_id)
        elif turn_id is not None:
            self.turn = turn_id
        self._deliver(seq, text)

    async def _read_gap(self) -> None:
        try:
            for event in await self._store.events_after(self.user, self.conversation_id, self.seq):
                if event.seq == self.seq + 1:
                    self._one(event.seq, event.turn_id, event.type, event.frame)
        except Exception:
            log.exception("could not read the frames of %s the bus missed", self.conversation_id)
        finally:
            self._gap = None
        if self._incoming and self._incoming[0][0] > self.seq + 1:
            # Not in the log either (pruned, or not committed: the owner failed): the listeners
            # cannot be caught up, and start over; what follows goes to those that come next.
            log.warning("%s: frames %d..%d are gone", self.conversation_id, self.seq + 1, self._incoming[0][0] - 1)
            self.seq = self._incoming[0][0] - 1
            self._missed()
        self._drain()
