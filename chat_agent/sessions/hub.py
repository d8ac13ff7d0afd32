"""The open conversations of this process, and what clients ask of them.

Connections come and go; a conversation stays in memory while someone listens or a turn
runs, so a turn survives its socket and every connection sees the same live state. The
turn itself belongs to its LiveConversation; the hub finds, opens and closes conversations,
routes client commands to them, and hands finished turns to the background jobs.
"""

from __future__ import annotations

import asyncio
import logging
import time

from chat_agent.agent.loop import Agent
from chat_agent.canvas.artifact import Canvas, artifact_state
from chat_agent.canvas.memory import MemoryBook
from chat_agent.config import Settings
from chat_agent.context.conversation import ConversationManager
from chat_agent.context.tokens import TokenCounter
from chat_agent.files.catalog import Files
from chat_agent.ids import new_id
from chat_agent.protocol import ArtifactState, ErrorFrame, MessageIn, StopReason, ToolInfo, VisibleMessage
from chat_agent.rejection import FrameRejected
from chat_agent.sessions.jobs import ConversationJobs
from chat_agent.sessions.live import Listener, LiveConversation
from chat_agent.sessions.prepare import TurnPreparer
from chat_agent.store import ArtifactRecord, ConversationRecord, CreateConversation, DeleteConversation, Store, StoreWriter

log = logging.getLogger(__name__)


class Hub:
    def __init__(self, settings: Settings, store: Store, writer: StoreWriter, agent: Agent, counter: TokenCounter,
                 files: Files):
        self.settings = settings
        self.store = store
        self.writer = writer
        self.agent = agent
        self.files = files
        self.memories = MemoryBook(store, writer)
        self.jobs = ConversationJobs(settings, agent.model, self.memories, self)
        self._counter = counter
        self._preparer = TurnPreparer(settings, agent, store, files, self.memories, counter)
        self._live: dict[str, LiveConversation] = {}
        self._loading: dict[str, asyncio.Lock] = {}

    # ---- what is open -------------------------------------------------------------------------

    def is_running(self, conversation_id: str) -> bool:
        live = self._live.get(conversation_id)
        return live is not None and live.running

    def live(self, owner: str, conversation_id: str) -> LiveConversation | None:
        live = self._live.get(conversation_id)
        return live if live is not None and live.owner == owner else None

    async def visible_messages(self, owner: str, conversation_id: str) -> list[VisibleMessage]:
        live = self.live(owner, conversation_id)
        if live is not None:
            return live.messages()
        items = await self.store.load_history(owner, conversation_id, "visible")
        return [VisibleMessage.model_validate(item.data) for item in items]

    async def artifact(self, owner: str, conversation_id: str) -> ArtifactState | None:
        live = self.live(owner, conversation_id)
        if live is not None:
            return live.canvas.state()
        return artifact_state(await self.store.get_artifact(owner, conversation_id))

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
        record = ConversationRecord(id=new_id(hex_chars=32), owner=owner, title=None, created_at=now,
                                    updated_at=now, last_seq=0)
        self.writer.submit([CreateConversation(owner, record.id, now)])
        return self._remember(record, [], [], None)

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
            artifact = await self.store.get_artifact(owner, conversation_id)
            live = self._remember(record, visible, model, artifact)
        self._loading.pop(conversation_id, None)
        return live

    def _remember(self, record: ConversationRecord, visible: list, model: list,
                  artifact: ArtifactRecord | None) -> LiveConversation:
        manager = ConversationManager(record.owner, record.id, visible=visible, model=model, counter=self._counter,
                                      writer=self.writer, summary_chars=self.settings.summary_chars,
                                      max_tokens=self.settings.max_context_tokens)
        canvas = Canvas(record.owner, record.id, artifact, self.writer, history_epoch=lambda: manager.epoch)
        live = LiveConversation(record, manager, canvas, self.writer)
        self._live[record.id] = live
        return live

    # ---- what clients ask for -------------------------------------------------------------

    def start_turn(self, live: LiveConversation, message: MessageIn) -> asyncio.Task[None] | None:
        """Starts a turn for a `message` frame: returns the task that checks the message and
        its attachments and then starts the turn (it raises FrameRejected to answer with an
        error), or None for a message already seen. The conversation is busy from this call
        on, so the frames after this one (an `abort`, another message) are read meanwhile."""
        if message.id is not None and live.knows_message(message.id):
            return None  # a client retrying a message it already sent: ignored, as PROTOCOL.md says
        if not self.agent.model.configured:
            raise FrameRejected("llm_error", "The server has no ANTHROPIC_API_KEY, so it cannot reach the model.")
        if live.running:
            raise FrameRejected("busy", "A turn is already running in this conversation; wait for done or abort it.")
        task = live.prepare(self._start_turn(live, message))
        task.add_done_callback(lambda _: self.release(live))
        return task

    async def _start_turn(self, live: LiveConversation, message: MessageIn) -> None:
        if message.id is not None and await self.store.has_client_message_id(live.owner, live.id, message.id):
            return
        turn, user, content = await self._preparer.prepare(live, message)
        if message.id is not None:
            live.remember_message(message.id)
        changes = live.canvas.changes
        task = live.start(self.agent, turn, user, content)
        task.add_done_callback(lambda done: self._turn_ended(live, done, live.canvas.changes != changes))

    def _turn_ended(self, live: LiveConversation, task: asyncio.Task[StopReason], artifact_changed: bool) -> None:
        stop: StopReason = "aborted" if task.cancelled() else task.result()
        try:
            self.jobs.after_turn(live, stop, artifact_changed)
        except Exception:
            log.exception("after-turn jobs failed")
        self.release(live)

    async def clear(self, live: LiveConversation) -> None:
        await live.abort()
        live.clear()

    async def select_version(self, live: LiveConversation, index: int) -> None:
        self._check_canvas_idle(live)
        canvas = live.canvas
        if canvas.current is None:
            raise FrameRejected("no_artifact", "This conversation has no artifact.")
        if not 1 <= index <= canvas.version_count:
            raise FrameRejected("not_found", f"The artifact has versions 1 to {canvas.version_count}.")
        await self.writer.flush()  # a version added a moment ago must be readable
        version = await self.store.get_artifact_version(live.owner, live.id, index)
        if version is None:
            raise FrameRejected("not_found", f"Version {index} of the artifact was not found.")
        canvas.select(index, version)

    def edit_artifact(self, live: LiveConversation, content: str, title: str | None) -> None:
        """The user's own edit in the canvas becomes a new version."""
        self._check_canvas_idle(live)
        current = live.canvas.current
        if current is None:
            raise FrameRejected("no_artifact", "This conversation has no artifact to edit.")
        live.canvas.add_version(type=current.type, title=title or current.title, language=current.language,
                                content=content, source="user")
        self.jobs.reflect_later(live)

    @staticmethod
    def _check_canvas_idle(live: LiveConversation) -> None:
        if live.running:
            raise FrameRejected("busy", "The agent is working on the artifact; wait for done or abort the turn.")

    async def delete(self, owner: str, conversation_id: str) -> bool:
        live = self.live(owner, conversation_id)
        if live is not None:
            await live.abort()
            gone = ErrorFrame(conversation_id=conversation_id, code="not_found", message="This conversation was deleted.")
            for listener in tuple(live.listeners):
                listener.close(4404, gone.to_json())
            live.listeners.clear()
            self._live.pop(conversation_id, None)
        elif await self.store.get_conversation(owner, conversation_id) is None:
            return False
        self.jobs.cancel(conversation_id)
        await self.writer.wait_for(self.writer.submit([DeleteConversation(owner, conversation_id)]))
        return True

    # ---- process life -----------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Aborts every running turn (each gets its `done`) and flushes the store."""
        await self.jobs.close()
        busy = [live for live in self._live.values() if live.running]
        await asyncio.gather(*(live.abort() for live in busy), return_exceptions=True)
        await self.writer.flush()
