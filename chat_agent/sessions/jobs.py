"""Work a conversation needs after a turn, in the background: its title after the first
exchange, and the debounced reflection that rewrites the user's memories after the artifact
changed (a newer turn restarts the wait; deleting the conversation cancels it).

The jobs wait in a `JobQueue` (queue.py): in this process on SQLite, in PostgreSQL with
several instances, where a due job runs once, on any instance. The title is the
conversation's to write: where the job runs on an instance that does not own the
conversation, it is handed to the owner (`Conversations.forward_job`). The reflection
writes the user's memories, by compare-and-set, and runs wherever it was taken.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from chat_agent import clock
from chat_agent.canvas.memory import MemoryBook
from chat_agent.canvas.reflection import reflect, transcript_for_reflection
from chat_agent.canvas.titles import make_title
from chat_agent.config import Settings
from chat_agent.model import LLMError, ModelClient
from chat_agent.protocol import StopReason
from chat_agent.sessions.live import Listener, LiveConversation
from chat_agent.sessions.pages import SESSION_MESSAGES
from chat_agent.sessions.queue import Job, JobQueue, LocalQueue
from chat_agent.tracing import job_span

log = logging.getLogger(__name__)

TITLE, REFLECTION = "title", "reflection"
# The newest messages a reflection reads (its transcript keeps the newest 20,000 characters).
REFLECTION_MESSAGES = 200
# Seconds a closing instance waits for the queue to take what it was given (the database
# may be gone: what it did not take is lost, like a job waiting in a process that ends).
CLOSE_WAIT = 5.0
# Seconds of a reflection's wait left below which it is not deferred again (the turn that
# deferred it stores its last frames just after).
SETTLED = 0.1

Operation = Callable[[], Awaitable[None]]


class Conversations(Protocol):
    """How a job gets hold of its conversation (it may have been closed meanwhile)."""

    async def attach(self, owner: str, conversation_id: str | None, listener: Listener) -> LiveConversation | None: ...

    async def own(self, live: LiveConversation) -> bool: ...

    async def forward_job(self, live: LiveConversation, kind: str) -> bool: ...

    def detach(self, live: LiveConversation, listener: Listener) -> None: ...

    async def active_at(self, live: LiveConversation) -> float | None: ...


class _Using:
    """A job's hold on its conversation: like a socket, it keeps the conversation open (and
    its lease) until the job is done. Without it the conversation could be let go during the
    job's model call and opened again by a client as another object, and the job would then
    write with seqs the new one also hands out."""

    def deliver(self, seq: int | None, text: str) -> None:
        pass

    def close(self, code: int, text: str | None = None) -> None:
        pass


class ConversationJobs:
    def __init__(self, settings: Settings, model: ModelClient, memories: MemoryBook, conversations: Conversations,
                 queue: JobQueue | None = None):
        self._settings = settings
        self._model = model
        self._memories = memories
        self._conversations = conversations
        self.queue = queue or LocalQueue()
        # What is asked of the queue, in order, by one task: the callers (a turn's end, an
        # edit) cannot wait, and a debounce must not overtake the deferral it restarts.
        self._operations: asyncio.Queue[Operation] = asyncio.Queue()
        self._submitter: asyncio.Task[None] | None = None
        self._closed = False
        # Jobs of other kinds than a conversation's, by kind: (owner, key) -> work. Their key
        # stands where a conversation id does (a knowledge document's indexing: its id).
        self._handlers: dict[str, Callable[[str, str], Awaitable[None]]] = {}

    def handle(self, kind: str, work: Callable[[str, str], Awaitable[None]]) -> None:
        """Jobs of `kind` run `work(owner, key)`; set before `start`."""
        self._handlers[kind] = work

    async def start(self) -> None:
        """Due jobs run from now on (`run`)."""
        await self.queue.start(self.run)

    def after_turn(self, live: LiveConversation, stop: StopReason, artifact_changed: bool) -> None:
        if live.title is None and stop == "end_turn":
            title = Job(TITLE, live.owner, live.id)
            self._submit(lambda: self.queue.defer(title, 0))
        if artifact_changed:
            reflection = Job(REFLECTION, live.owner, live.id)
            self._submit(lambda: self.queue.defer(reflection, self._settings.reflection_delay, restart=True))
        # A turn without a change delays a waiting reflection too, but costs the queue nothing
        # now: the reflection looks at the conversation's last activity when it comes due
        # (`_reflect`). Asking the shared queue at every turn's end cost a transaction each.
        # (Such a turn ending while the reflection runs is read by the next one only: any
        # frame counts as activity, a late title too, and a reflection must not beget another.)

    def reflect_later(self, live: LiveConversation) -> None:
        reflection = Job(REFLECTION, live.owner, live.id)
        self._submit(lambda: self.queue.defer(reflection, self._settings.reflection_delay, restart=True))

    def cancel(self, conversation_id: str) -> None:
        self._submit(lambda: self.queue.cancel(conversation_id))

    async def close(self) -> None:
        """What was asked of the queue is handed to it (bounded by CLOSE_WAIT), then the
        jobs running here stop."""
        self._closed = True
        if self._submitter is not None:
            try:
                async with asyncio.timeout(CLOSE_WAIT):
                    await self._operations.join()
            except TimeoutError:
                log.warning("%d background job changes were not queued before shutdown", self._operations.qsize())
            self._submitter.cancel()
            await asyncio.gather(self._submitter, return_exceptions=True)
        await self.queue.close()

    async def run(self, job: Job) -> None:
        """A due job, here: the queue chose this instance (or the owner was handed it)."""
        work = {TITLE: self._name, REFLECTION: self._reflect}.get(job.kind) or self._handlers.get(job.kind)
        if work is None:
            log.warning("unknown background job %s", job.key)
            return
        try:
            with job_span(job.kind, job.conversation_id):
                await work(job.owner, job.conversation_id)
        except LLMError as exc:
            # The model API did not answer it (unreachable, overloaded): one line that says
            # why, as a turn's error does, not a traceback of our own code at ERROR.
            log.warning("background job %s failed: %s", job.key, exc.message)

    def _submit(self, operation: Operation) -> None:
        if self._closed:
            return
        self._operations.put_nowait(operation)
        if self._submitter is None:
            self._submitter = asyncio.get_running_loop().create_task(self._submitting(), name="background-queue")

    async def _submitting(self) -> None:
        while True:
            operation = await self._operations.get()
            try:
                await operation()
            except Exception:
                log.exception("could not queue a background job")
            finally:
                self._operations.task_done()

    async def _name(self, owner: str, conversation_id: str) -> None:
        using = _Using()
        live = await self._conversations.attach(owner, conversation_id, using)
        if live is None:
            return
        try:
            if live.title is not None:
                return
            if await self._conversations.forward_job(live, TITLE):
                return  # another instance owns the conversation: it ran the job
            messages = await live.recent(SESSION_MESSAGES)
            user = next((m.content for m in messages if m.role == "user"), "")
            reply = next((m.content for m in messages if m.role == "assistant"), "")
            title = await make_title(self._model, model_name=self._settings.small_model,
                                     user_text=user, reply_text=reply)
            # Still its owner after the model call (the lease may have gone meanwhile)?
            if title and live.title is None and await self._conversations.own(live) and live.title is None:
                live.set_title(title)
        finally:
            self._conversations.detach(live, using)

    async def _reflect(self, owner: str, conversation_id: str) -> None:
        using = _Using()
        live = await self._conversations.attach(owner, conversation_id, using)
        if live is None:
            return
        try:
            if await self._again_later(live, await self._conversations.active_at(live)):
                return  # a newer turn came during the wait: the wait restarts from it
            memories = await self._memories.load(owner)
            current = live.canvas.current
            transcript = transcript_for_reflection(await live.recent(REFLECTION_MESSAGES))
            result = await reflect(self._model, model_name=self._settings.small_model, memories=memories,
                                   transcript=transcript,
                                   artifact=current.content if current else None)
            if result is not None:  # merged with what changed meanwhile, if anything did
                await self._memories.revise(owner, memories, *result)
        finally:
            self._conversations.detach(live, using)

    async def _again_later(self, live: LiveConversation, active: float | None) -> bool:
        """Defers the conversation's reflection again if its last activity (`active`, the
        store's clock) is more recent than the wait it ended; whether it did."""
        later = active + self._settings.reflection_delay - clock.now() if active is not None else 0.0
        if later <= SETTLED:
            return False
        await self.queue.defer(Job(REFLECTION, live.owner, live.id), later)
        return True
