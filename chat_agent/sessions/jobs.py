"""Work a conversation needs after a turn, in the background: its title after the first
exchange, and the debounced reflection that rewrites the user's memories after the artifact
changed (a newer turn restarts the wait; deleting the conversation cancels it)."""

from __future__ import annotations

from typing import Awaitable, Callable, Protocol

from chat_agent.canvas.memory import MemoryBook
from chat_agent.canvas.reflection import reflect, transcript_for_reflection
from chat_agent.canvas.titles import make_title
from chat_agent.config import Settings
from chat_agent.model import ModelClient
from chat_agent.protocol import StopReason
from chat_agent.sessions.background import Background
from chat_agent.sessions.live import LiveConversation
from chat_agent.sessions.pages import SESSION_MESSAGES
from chat_agent.tracing import job_span

# The newest messages a reflection reads (its transcript keeps the newest 20,000 characters).
REFLECTION_MESSAGES = 200


class Conversations(Protocol):
    """How a job gets hold of its conversation (it may have been closed meanwhile)."""

    async def open(self, owner: str, conversation_id: str) -> LiveConversation | None: ...

    async def own(self, live: LiveConversation) -> bool: ...

    def release(self, live: LiveConversation) -> None: ...


class ConversationJobs:
    def __init__(self, settings: Settings, model: ModelClient, memories: MemoryBook, conversations: Conversations):
        self._settings = settings
        self._model = model
        self._memories = memories
        self._conversations = conversations
        self._background = Background()

    def after_turn(self, live: LiveConversation, stop: StopReason, artifact_changed: bool) -> None:
        if live.title is None and stop == "end_turn":
            self._background.schedule(self._key(live.id, "title"), 0, lambda: self._traced("title", live, self._name))
        if artifact_changed or self._key(live.id, "reflect") in self._background.pending():
            self.reflect_later(live)  # a newer turn restarts the wait

    def reflect_later(self, live: LiveConversation) -> None:
        self._background.schedule(self._key(live.id, "reflect"), self._settings.reflection_delay,
                                  lambda: self._traced("reflection", live, self._reflect))

    def cancel(self, conversation_id: str) -> None:
        self._background.cancel(self._key(conversation_id, ""))

    async def close(self) -> None:
        await self._background.close()

    @staticmethod
    def _key(conversation_id: str, job: str) -> str:
        return f"conv:{conversation_id}:{job}"

    @staticmethod
    async def _traced(name: str, live: LiveConversation, job: Callable[[str, str], Awaitable[None]]) -> None:
        with job_span(name, live.id):
            await job(live.owner, live.id)

    async def _name(self, owner: str, conversation_id: str) -> None:
        live = await self._conversations.open(owner, conversation_id)
        if live is None or live.title is not None:
            return
        if not await self._conversations.own(live):
            # Another instance runs it now: its next turn ends there and names it there.
            self._conversations.release(live)
            return
        messages = await live.recent(SESSION_MESSAGES)
        user = next((m.content for m in messages if m.role == "user"), "")
        reply = next((m.content for m in messages if m.role == "assistant"), "")
        try:
            title = await make_title(self._model, model_name=self._settings.small_model,
                                     user_text=user, reply_text=reply)
            # Still its owner after the model call (the lease may have gone meanwhile)?
            if title and live.title is None and await self._conversations.own(live) and live.title is None:
                live.set_title(title)
        finally:
            self._conversations.release(live)

    async def _reflect(self, owner: str, conversation_id: str) -> None:
        live = await self._conversations.open(owner, conversation_id)
        if live is None:
            return
        try:
            memories = await self._memories.load(owner)
            current = live.canvas.current
            transcript = transcript_for_reflection(await live.recent(REFLECTION_MESSAGES))
            result = await reflect(self._model, model_name=self._settings.small_model, memories=memories,
                                   transcript=transcript,
                                   artifact=current.content if current else None)
            if result is not None:  # merged with what changed meanwhile, if anything did
                await self._memories.revise(owner, memories, *result)
        finally:
            self._conversations.release(live)
