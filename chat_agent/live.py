"""A conversation while it is open: its state in memory, its event log, its listeners.

Frames get their `seq` here and go out only after the store writer committed them, so
whatever a client was told survives a crash, and every connection on the conversation
sees the same frames in the same order.
"""

from __future__ import annotations

import asyncio

from typing import Protocol, Sequence

from .canvas import Canvas
from .conversation import ConversationManager
from .fold import fold
from .protocol import ArtifactFrame, ContextInfo, SessionFrame, ServerFrame, TitleFrame, ToolInfo, VisibleMessage
from .store import AppendEvents, ConversationRecord, EventRecord, Op, SetTitle
from .writer import StoreWriter


class Listener(Protocol):
    def deliver(self, seq: int, text: str) -> None: ...

    def close(self, code: int, text: str | None = None) -> None: ...


class LiveConversation:
    def __init__(self, record: ConversationRecord, manager: ConversationManager, canvas: Canvas,
                 writer: StoreWriter):
        self.id = record.id
        self.owner = record.owner
        self.title = record.title
        self.manager = manager
        self.canvas = canvas
        canvas.on_change = lambda state: self.publish(ArtifactFrame(artifact=state))
        self.seq = record.last_seq
        self.listeners: set[Listener] = set()
        self.reply: VisibleMessage | None = None  # the running turn's reply, as streamed so far
        self.runner: object | None = None  # the TurnRunner while a turn runs
        # A message whose attachments are being checked and stored: its turn has not started
        # yet, but the conversation is busy and `abort` cancels it.
        self.preparing: asyncio.Task[None] | None = None
        self.turn_starts: list[int] = []  # first seqs of recent turns, for event retention
        self.client_ids: set[str] = set()  # client message ids seen while open (the store has them all)
        self._writer = writer
        self._ticket = 0

    @property
    def writer(self) -> StoreWriter:
        return self._writer

    @property
    def running(self) -> bool:
        return self.runner is not None or self.preparing is not None

    def publish(self, frame: ServerFrame, turn_id: str | None = None, ops: Sequence[Op] = ()) -> int:
        """Gives the frame its seq, logs it, and hands it to every listener once committed."""
        self.seq += 1
        frame.conversation_id = self.id
        frame.seq = self.seq
        if self.reply is not None:
            fold(self.reply, frame)
        text = frame.to_json()
        event = EventRecord(conversation_id=self.id, seq=self.seq, type=frame.type, turn_id=turn_id, frame=text)
        seq = self.seq
        self._ticket = self._writer.submit(
            [*ops, AppendEvents(self.owner, self.id, (event,))], lambda: self._deliver(seq, text))
        return seq

    def _deliver(self, seq: int, text: str) -> None:
        for listener in tuple(self.listeners):
            listener.deliver(seq, text)

    def set_title(self, title: str) -> None:
        self.title = title
        self.publish(TitleFrame(title=title), ops=[SetTitle(self.owner, self.id, title)])

    def messages(self) -> list[VisibleMessage]:
        """The visible history with the running turn's reply as streamed so far."""
        messages = list(self.manager.visible)
        if self.reply is not None:
            messages.append(self.reply.model_copy(deep=True))
        return messages

    def snapshot(self, tools: list[ToolInfo]) -> tuple[SessionFrame, int]:
        """The `session` frame, consistent with its seq, and the writer ticket to wait for
        before sending it (it may show state that is not committed yet)."""
        messages = self.messages()
        frame = SessionFrame(
            conversation_id=self.id, seq=self.seq, title=self.title, artifact=self.canvas.state(), messages=messages,
            context=ContextInfo(tokens=self.manager.tokens, max_tokens=self.manager.max_tokens),
            tools=tools, running=self.running)
        return frame, self._writer.ticket
