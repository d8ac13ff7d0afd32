"""The open conversations of this process, and what can be done to them.

Connections come and go; a conversation stays in memory while someone listens or a turn
runs, so a turn survives its socket and every connection sees the same live state.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from .attachments import AttachmentReader, DocumentLibrary
from .background import Background
from .canvas import Canvas, artifact_state
from .config import Settings
from .conversation import ConversationManager
from .files import Files
from .live import Listener, LiveConversation
from .loop import Agent
from .memory import MemoryBook
from .protocol import (ArtifactState, ContextCleared, ContextUpdate, Done, ErrorFrame, MessageIn, ToolInfo, Usage,
                       VisibleMessage)
from .runner import new_id
from .store import (ArtifactRecord, ConversationRecord, CreateConversation, DeleteConversation,
                    RecordClientMessageId, Store)
from .tokens import TokenCounter
from .rejection import FrameRejected
from .turns import prepare_turn
from .writer import StoreWriter

log = logging.getLogger(__name__)


class Hub:
    def __init__(self, settings: Settings, store: Store, writer: StoreWriter, agent: Agent, counter: TokenCounter,
                 files: Files):
        self.settings = settings
        self.store = store
        self.writer = writer
        self.agent = agent
        self.counter = counter
        self.files = files
        self.documents = DocumentLibrary(files)
        self.attachments = AttachmentReader(files, self.documents, settings)
        self.memories = MemoryBook(store, writer)
        self.background = Background()
        self._live: dict[str, LiveConversation] = {}
        self._loading: dict[str, asyncio.Lock] = {}

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
        record = ConversationRecord(id=uuid.uuid4().hex, owner=owner, title=None, created_at=now,
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
        manager = ConversationManager(record.owner, record.id, visible=visible, model=model, counter=self.counter,
                                      writer=self.writer, summary_chars=self.settings.summary_chars,
                                      max_tokens=self.settings.max_context_tokens)
        canvas = Canvas(record.owner, record.id, artifact, self.writer)
        live = LiveConversation(record, manager, canvas, self.writer)
        self._live[record.id] = live
        return live

    # ---- what clients ask for -------------------------------------------------------------

    def start_turn(self, live: LiveConversation, message: MessageIn) -> asyncio.Task[None] | None:
        """Starts a turn for a `message` frame: returns the task that checks the message and
        its attachments and then starts the turn (it raises FrameRejected to answer with an
        error), or None for a message already seen. The conversation is busy from this call
        on, so the frames after this one (an `abort`, another message) are read meanwhile."""
        if message.id is not None and message.id in live.client_ids:
            return None  # a client retrying a message it already sent: ignored, as PROTOCOL.md says
        if not self.agent.model.configured:
            raise FrameRejected("llm_error", "The server has no ANTHROPIC_API_KEY, so it cannot reach the model.")
        if live.running:
            raise FrameRejected("busy", "A turn is already running in this conversation; wait for done or abort it.")
        task = asyncio.get_running_loop().create_task(self._start_turn(live, message), name=f"prepare:{live.id}")
        live.preparing = task
        return task

    async def _start_turn(self, live: LiveConversation, message: MessageIn) -> None:
        prepared = None
        try:
            if message.id is None or not await self.store.has_client_message_id(live.owner, live.id, message.id):
                prepared = await prepare_turn(self, live, message)
        except asyncio.CancelledError:
            # Aborted before its turn began: nothing of it is kept, and `done` says so.
            live.publish(Done(message_id=new_id("msg"), stop_reason="aborted", usage=Usage()))
            raise
        finally:
            live.preparing = None
            if prepared is None:
                self.release(live)
        if prepared is None:
            return
        runner, user_message, content = prepared
        if message.id is not None:
            live.client_ids.add(message.id)
            self.writer.submit([RecordClientMessageId(live.owner, live.id, message.id)])
        runner.after = self._after_turn
        runner.start(user_message, content)
        runner.task.add_done_callback(lambda _: self.release(live))

    async def abort(self, live: LiveConversation) -> None:
        preparing = live.preparing
        if preparing is not None:
            preparing.cancel()
            await asyncio.gather(preparing, return_exceptions=True)
            return
        runner = live.runner
        if runner is not None:
            await runner.abort()

    async def clear(self, live: LiveConversation) -> None:
        await self.abort(live)
        live.manager.clear()
        live.publish(ContextCleared())
        live.publish(ContextUpdate(tokens=live.manager.tokens, max_tokens=live.manager.max_tokens))

    async def select_version(self, live: LiveConversation, index: int) -> None:
        self._check_canvas_idle(live)
        if live.canvas.current is None:
            raise FrameRejected("no_artifact", "This conversation has no artifact.")
        if not 1 <= index <= live.canvas.version_count:
            raise FrameRejected("not_found", f"The artifact has versions 1 to {live.canvas.version_count}.")
        await self.writer.flush()  # a version added a moment ago must be readable
        version = await self.store.get_artifact_version(live.owner, live.id, index)
        if version is None:
            raise FrameRejected("not_found", f"Version {index} of the artifact was not found.")
        live.canvas.select(index, version)

    def edit_artifact(self, live: LiveConversation, content: str, title: str | None) -> None:
        """The user's own edit in the canvas becomes a new version."""
        self._check_canvas_idle(live)
        current = live.canvas.current
        if current is None:
            raise FrameRejected("no_artifact", "This conversation has no artifact to edit.")
        live.canvas.add_version(type=current.type, title=title or current.title, language=current.language,
                                content=content, source="user")
        self._schedule_reflection(live)

    def _check_canvas_idle(self, live: LiveConversation) -> None:
        if live.running:
            raise FrameRejected("busy", "The agent is working on the artifact; wait for done or abort the turn.")

    async def delete(self, owner: str, conversation_id: str) -> bool:
        live = self.live(owner, conversation_id)
        if live is not None:
            await self.abort(live)
            gone = ErrorFrame(conversation_id=conversation_id, code="not_found", message="This conversation was deleted.")
            for listener in tuple(live.listeners):
                listener.close(4404, gone.to_json())
            live.listeners.clear()
            self._live.pop(conversation_id, None)
        elif await self.store.get_conversation(owner, conversation_id) is None:
            return False
        self.background.cancel(f"conv:{conversation_id}:")
        await self.writer.wait_for(self.writer.submit([DeleteConversation(owner, conversation_id)]))
        return True

    # ---- after a turn: title and reflection -------------------------------------------------

    def _after_turn(self, runner, stop: str) -> None:
        live = runner.live
        if live.title is None and stop == "end_turn":
            self.background.schedule(f"conv:{live.id}:title", 0, lambda: self._name(live.owner, live.id))
        key = f"conv:{live.id}:reflect"
        if runner.artifact_changed or key in self.background.pending():
            self._schedule_reflection(live)  # a newer turn restarts the wait

    def _schedule_reflection(self, live: LiveConversation) -> None:
        self.background.schedule(f"conv:{live.id}:reflect", self.settings.reflection_delay,
                                 lambda: self._reflect(live.owner, live.id))

    async def _name(self, owner: str, conversation_id: str) -> None:
        from .titles import make_title

        live = await self.open(owner, conversation_id)
        if live is None or live.title is not None:
            return
        messages = live.manager.visible
        user = next((m.content for m in messages if m.role == "user"), "")
        reply = next((m.content for m in messages if m.role == "assistant"), "")
        try:
            title = await make_title(self.agent.model, model_name=self.settings.small_model,
                                     user_text=user, reply_text=reply)
            if title and live.title is None:
                live.set_title(title)
        finally:
            self.release(live)

    async def _reflect(self, owner: str, conversation_id: str) -> None:
        from .reflection import reflect, transcript_for_reflection

        live = await self.open(owner, conversation_id)
        if live is None:
            return
        try:
            memories = await self.memories.load(owner)
            current = live.canvas.current
            result = await reflect(self.agent.model, model_name=self.settings.small_model, memories=memories,
                                   transcript=transcript_for_reflection(live.manager.visible),
                                   artifact=current.content if current else None)
            if result is not None:
                self.memories.replace(owner, *result)
        finally:
            self.release(live)

    # ---- process life -----------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Aborts every running turn (each gets its `done`) and flushes the store."""
        await self.background.close()
        busy = [live for live in self._live.values() if live.running]
        await asyncio.gather(*(self.abort(live) for live in busy), return_exceptions=True)
        await self.writer.flush()
