"""The open conversations of this process, and what can be done to them.

Connections come and go; a conversation stays in memory while someone listens or a turn
runs, so a turn survives its socket and every connection sees the same live state.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from .config import Settings
from .conversation import ConversationManager
from .live import Listener, LiveConversation
from .loop import Agent
from .protocol import ContextCleared, ContextUpdate, ErrorFrame, MessageIn, ToolInfo, VisibleMessage
from .store import ConversationRecord, CreateConversation, DeleteConversation, RecordClientMessageId, Store
from .tokens import TokenCounter
from .turns import FrameRejected, prepare_turn
from .writer import StoreWriter

log = logging.getLogger(__name__)


class Hub:
    def __init__(self, settings: Settings, store: Store, writer: StoreWriter, agent: Agent, counter: TokenCounter):
        self.settings = settings
        self.store = store
        self.writer = writer
        self.agent = agent
        self.counter = counter
        self._live: dict[str, LiveConversation] = {}
        self._loading: dict[str, asyncio.Lock] = {}

    def is_running(self, conversation_id: str) -> bool:
        live = self._live.get(conversation_id)
        return live is not None and live.running

    async def visible_messages(self, owner: str, conversation_id: str) -> list[VisibleMessage]:
        live = self._live.get(conversation_id)
        if live is not None and live.owner == owner:
            return live.messages()
        items = await self.store.load_history(owner, conversation_id, "visible")
        return [VisibleMessage.model_validate(item.data) for item in items]

    def tools(self) -> list[ToolInfo]:
        return [ToolInfo(name=a.name, enabled=a.enabled, reason=a.reason) for a in self.agent.registry.availability()]

    # ---- opening and closing ----------------------------------------------------------------

    async def attach(self, owner: str, conversation_id: str | None, listener: Listener) -> LiveConversation | None:
        """Opens (or creates, with no id) a conversation and adds the listener to it, or
        returns None when it does not exist for this owner."""
        live = await (self._create(owner) if conversation_id is None else self.open(owner, conversation_id))
        if live is not None:
            live.listeners.add(listener)
        return live

    def detach(self, live: LiveConversation, listener: Listener) -> None:
        live.listeners.discard(listener)
        self.release(live)

    def release(self, live: LiveConversation) -> None:
        if not live.listeners and not live.running and self._live.get(live.id) is live:
            del self._live[live.id]

    async def _create(self, owner: str) -> LiveConversation:
        now = time.time()
        record = ConversationRecord(id=uuid.uuid4().hex, owner=owner, title=None, created_at=now,
                                    updated_at=now, last_seq=0)
        self.writer.submit([CreateConversation(owner, record.id, now)])
        return self._remember(record, [], [])

    async def open(self, owner: str, conversation_id: str) -> LiveConversation | None:
        live = self._live.get(conversation_id)
        if live is not None:
            return live if live.owner == owner else None
        lock = self._loading.setdefault(conversation_id, asyncio.Lock())
        async with lock:
            live = self._live.get(conversation_id)
            if live is not None:
                return live if live.owner == owner else None
            record = await self.store.get_conversation(owner, conversation_id)
            if record is None:
                return None
            visible = await self.store.load_history(owner, conversation_id, "visible")
            model = await self.store.load_history(owner, conversation_id, "model")
            live = self._remember(record, visible, model)
        self._loading.pop(conversation_id, None)
        return live

    def _remember(self, record: ConversationRecord, visible: list, model: list) -> LiveConversation:
        manager = ConversationManager(record.owner, record.id, visible=visible, model=model, counter=self.counter,
                                      writer=self.writer, summary_chars=self.settings.summary_chars,
                                      max_tokens=self.settings.max_context_tokens)
        live = LiveConversation(record, manager, self.writer)
        self._live[record.id] = live
        return live

    # ---- what clients ask for -------------------------------------------------------------

    async def start_turn(self, live: LiveConversation, message: MessageIn) -> None:
        """Starts a turn for a `message` frame; raises FrameRejected to answer with an error."""
        if message.id is not None and (message.id in live.client_ids or await self.store.has_client_message_id(
                live.owner, live.id, message.id)):
            return  # a client retrying a message it already sent: ignored, as PROTOCOL.md says
        if not self.agent.model.configured:
            raise FrameRejected("llm_error", "The server has no ANTHROPIC_API_KEY, so it cannot reach the model.")
        if live.running:
            raise FrameRejected("busy", "A turn is already running in this conversation; wait for done or abort it.")
        runner, user_message, content = prepare_turn(self, live, message)
        if message.id is not None:
            live.client_ids.add(message.id)
            self.writer.submit([RecordClientMessageId(live.owner, live.id, message.id)])
        runner.start(user_message, content)
        runner.task.add_done_callback(lambda _: self.release(live))

    async def abort(self, live: LiveConversation) -> None:
        runner = live.runner
        if runner is not None:
            await runner.abort()

    async def clear(self, live: LiveConversation) -> None:
        await self.abort(live)
        live.manager.clear()
        live.publish(ContextCleared())
        live.publish(ContextUpdate(tokens=live.manager.tokens, max_tokens=live.manager.max_tokens))

    async def delete(self, owner: str, conversation_id: str) -> bool:
        live = self._live.get(conversation_id)
        if live is not None and live.owner == owner:
            await self.abort(live)
            gone = ErrorFrame(conversation_id=conversation_id, code="not_found", message="This conversation was deleted.")
            for listener in tuple(live.listeners):
                listener.close(4404, gone.to_json())
            live.listeners.clear()
            self._live.pop(conversation_id, None)
        elif await self.store.get_conversation(owner, conversation_id) is None:
            return False
        await self.writer.wait_for(self.writer.submit([DeleteConversation(owner, conversation_id)]))
        return True

    # ---- process life -----------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Aborts every running turn (each gets its `done`) and flushes the store."""
        runners = [live.runner for live in self._live.values() if live.runner is not None]
        await asyncio.gather(*(runner.abort() for runner in runners), return_exceptions=True)
        await self.writer.flush()
