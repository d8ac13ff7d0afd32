"""One instance's sessions layer, composed: the open conversations (`registry`), what clients
ask of them (`commands`), what brings them back in line after a fault (`recovery`, and
`continuation` for cut turns), the background jobs, and what the web layer reads of them.
Queues, each served by a task while the hub runs (`Hub.running`), bring what the rest tells
it: the bus (frames and commands of other instances), leases lost or expired, lost writes."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, AsyncIterator, Awaitable

from chat_agent.agent.loop import Agent
from chat_agent.canvas.artifact import artifact_state
from chat_agent.canvas.memory import MemoryBook
from chat_agent.config import Settings
from chat_agent.context.tokens import TokenCounter
from chat_agent.files.catalog import Files
from chat_agent.model.demo import NOTICE as DEMO_NOTICE
from chat_agent.protocol import AnyClientFrame, ArtifactState, SessionFrame, ToolInfo, VisibleMessage
from chat_agent.sessions.bus import Bus, LocalBus
from chat_agent.sessions.commands import Commands
from chat_agent.sessions.continuation import Continuer, hand_over
from chat_agent.sessions.forwarding import Forwarder
from chat_agent.sessions.jobs import ConversationJobs
from chat_agent.sessions.live import Listener, LiveConversation
from chat_agent.sessions.messages import Answer, Deleted, Frames, Resync, Status
from chat_agent.sessions.outage import StoreWatch
from chat_agent.sessions.ownership import LeaseExpired, LeaseLost, Ownership
from chat_agent.sessions.pages import visible_page
from chat_agent.sessions.prepare import Knowledge, TurnPreparer
from chat_agent.sessions.queue import JobQueue
from chat_agent.sessions.recovery import Recovery
from chat_agent.sessions.registry import CLOSE_NOT_FOUND, Registry, deleted
from chat_agent.sessions.replica import session_from_store
from chat_agent.store import Store, StoreWriter

log = logging.getLogger(__name__)

SETTLE_WAIT = 10.0  # seconds a stopping instance waits for its background work
SNAPSHOT_READS = 20  # a follower's `session` read again while the store lags what it delivered


class Hub:
    def __init__(self, settings: Settings, store: Store, writer: StoreWriter, agent: Agent, counter: TokenCounter,
                 files: Files, *, bus: Bus | None = None, queue: JobQueue | None = None,
                 knowledge: Knowledge | None = None):
        self.settings, self.store, self.writer, self.agent, self.files = settings, store, writer, agent, files
        self.bus = bus or LocalBus("local")
        self._tools: tuple[int, list[ToolInfo]] | None = None  # (registry version, what `tools` says)
        self.ownership = Ownership(self.bus.instance, store, writer, lease_seconds=settings.lease_seconds,
                                   sweep_seconds=settings.lease_seconds / 5, others=self.bus.shared)
        self.memories = MemoryBook(store, writer)
        forwarder = Forwarder(self.bus)
        preparer = TurnPreparer(settings, agent, store, files, self.memories, counter, knowledge)
        self.registry = Registry(settings, store, writer, counter, self.bus, self.ownership, forwarder,
                                 Continuer(settings, agent, store, preparer))
        self.jobs = ConversationJobs(settings, agent.model, self.memories, self.registry, queue)
        self.recovery = Recovery(self.registry)
        self.commands = Commands(settings, agent, self.registry, forwarder, self.jobs, preparer)
        self._forwarder = forwarder

    # ---- life ---------------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Hub]:
        """The instance joins the others (bus, leases) and serves what they say until the block
        ends; then its turns are aborted (each gets its `done`) and everything is stored. What
        a failed start opened is closed again."""
        async with AsyncExitStack() as stack:
            await self.bus.start()
            stack.push_async_callback(self.bus.close)
            await self.ownership.start()
            stack.push_async_callback(self.ownership.close)
            watch = StoreWatch(self.writer, self.registry)
            for name, serve in (("bus-inbox", self._serve_bus), ("leases", self._serve_leases),
                                ("store-losses", self._serve_losses), ("store-watch", watch.serve)):
                stack.push_async_callback(_stop, asyncio.get_running_loop().create_task(serve(), name=name))
            stack.push_async_callback(self._shutdown)
            yield self

    async def start_work(self) -> None:
        """Closes what the last process left running, then runs background jobs."""
        await self.recovery.recover()
        await self.jobs.start()

    async def _shutdown(self) -> None:
        """Hands running turns over (or aborts them), lets background work end (drained first),
        and stores all of it; a store that does not answer is waited for `StoreWriter.drain`."""
        if self.settings.continue_turns:
            await hand_over(self.registry.all(), self.writer, self.ownership, expire=self.bus.shared)
        await self._abort_all()
        await self.jobs.close()
        stored = await self.writer.drain()
        await self.registry.settle(SETTLE_WAIT if stored else 1.0)
        await self._abort_all()  # what a recovery or a forwarded command started meanwhile
        await self.writer.drain()

    async def _abort_all(self) -> None:
        busy = [live for live in self.registry.all() if live.busy]
        await asyncio.gather(*(live.abort() for live in busy), return_exceptions=True)

    async def _serve_bus(self) -> None:
        registry, inbox = self.registry, self.bus.inbox
        while True:
            match await inbox.get():
                case Frames(conversation=conversation_id, frames=frames, instance=instance):
                    live = registry.get(conversation_id)
                    # Not while it is brought back in line: its sockets may have been shown
                    # frames the new owner's do not continue; it follows from the log after.
                    if live is not None and not self.ownership.holds(conversation_id) and not live.recovering:
                        live.follow(running=False).arrived(frames, instance)  # type: ignore[arg-type]
                case Deleted(conversation=conversation_id):
                    live = registry.get(conversation_id)
                    if live is not None and not self.ownership.holds(conversation_id):
                        registry.close_all(live, CLOSE_NOT_FOUND, deleted(conversation_id))
                case Status(conversation=conversation_id, turn=turn, seq=seq, text=text):
                    live = registry.get(conversation_id)
                    if live is not None and not self.ownership.holds(conversation_id):
                        live.owners_status(turn, seq, text)
                case Answer() as answer:
                    self._forwarder.answered(answer)
                case Resync():
                    for live in registry.all():
                        if live.follower is not None:
                            live.follower.catch_up()
                case request:
                    registry.spawn(self.commands.answer(request), f"serve:{request.kind}")  # type: ignore[arg-type]

    async def _serve_leases(self) -> None:
        events = self.ownership.events
        while True:
            event = await events.get()
            try:
                match event:
                    case LeaseLost(conversation_id=conversation_id):
                        self.recovery.lease_lost(conversation_id)
                    case LeaseExpired(lease=lease):
                        await self.recovery.take_over(lease)
            except Exception:
                log.exception("could not handle %s", event)
            finally:
                events.task_done()

    async def _serve_losses(self) -> None:
        while True:
            self.recovery.writes_lost(await self.writer.losses.get())

    # ---- what clients open and ask --------------------------------------------------------------

    async def attach(self, owner: str, conversation_id: str | None, listener: Listener) -> LiveConversation | None:
        return await self.registry.attach(owner, conversation_id, listener)

    async def attach_thread(self, owner: str, thread_id: str, listener: Listener) -> LiveConversation | None:
        return await self.registry.attach_thread(owner, thread_id, listener)

    def detach(self, live: LiveConversation, listener: Listener) -> None:
        self.registry.detach(live, listener)

    def spawn(self, job: Awaitable[Any], name: str) -> None:
        self.registry.spawn(job, name)  # type: ignore[arg-type]

    async def command(self, live: LiveConversation, frame: AnyClientFrame, *,
                      echo: bool = False) -> asyncio.Future[object] | None:
        """See `Commands.command`."""
        return await self.commands.command(live, frame, echo=echo)

    async def delete(self, owner: str, conversation_id: str) -> bool:
        return await self.registry.delete(owner, conversation_id, self.jobs.cancel)

    # ---- what clients read ----------------------------------------------------------------------

    def is_running(self, conversation_id: str) -> bool:
        live = self.registry.get(conversation_id)
        return live is not None and live.running

    def live(self, owner: str, conversation_id: str) -> LiveConversation | None:
        return self.registry.live(owner, conversation_id)

    def tools(self) -> list[ToolInfo]:
        """What every `session` frame lists, made once per change of the registry (an MCP
        server's tools coming or going): made for each socket, it was ~9% of the CPU of
        opening one. Shared: not to be changed."""
        registry = self.agent.registry
        if self._tools is None or self._tools[0] != registry.version:
            self._tools = (registry.version, [ToolInfo(name=a.name, enabled=a.enabled, reason=a.reason)
                                              for a in registry.availability()])
        return self._tools[1]

    async def visible_messages(self, owner: str, conversation_id: str) -> list[VisibleMessage]:
        """The whole visible history, with the running turn's reply as streamed so far."""
        live = self.live(owner, conversation_id)
        reply = live.reply() if live is not None else None
        await self.writer.flush()  # what was said a moment ago is in the store once committed
        page = await self.store.history_page(owner, conversation_id, "visible", None, 2**31)  # the whole path
        messages = visible_page(page, None)[0] if page is not None else []  # the active path
        if reply is not None and all(m.id != reply.id for m in messages):  # it may have ended meanwhile
            messages.append(reply)
        return messages

    async def history_page(self, owner: str, conversation_id: str, before: str | None,
                           limit: int, leaf: str | None = None) -> tuple[list[VisibleMessage], str | None] | None:
        """A page of the visible history (`LiveConversation.page`), of the path to `leaf` if given."""
        live = self.live(owner, conversation_id)
        if live is not None and leaf is None:
            return await live.page(before, limit)
        await self.writer.flush()
        page = await self.store.history_page(owner, conversation_id, "visible", before, limit, leaf)
        return None if page is None else visible_page(page, None)

    async def artifact(self, owner: str, conversation_id: str) -> ArtifactState | None:
        live = self.live(owner, conversation_id)
        if live is not None:
            return live.canvas.state()
        return artifact_state(await self.store.get_artifact(owner, conversation_id))

    async def snapshot(self, live: LiveConversation) -> SessionFrame | None:
        """The `session` frame: from memory where the conversation is owned, else (or when
        another instance wrote it since) from the store as of its last committed frame.
        None if it was deleted meanwhile."""
        await live.until_recovered()
        frame = None
        # Not stored yet (no message): only this instance knows it, from memory.
        if not self.bus.shared or self.ownership.holds(live.id) or live.unstored is not None:
            frame = await live.snapshot(self.tools(), shared=self.bus.shared)
        if frame is None:
            await self.writer.flush()  # what this instance wrote (a conversation it just created, say)
            for _ in range(SNAPSHOT_READS):  # never older than what sockets here were sent already
                frame = await session_from_store(self.store, live.owner, live.id, self.tools(),
                                                 self.settings.max_context_tokens)
                if frame is None or (frame.seq or 0) >= live.seq:
                    break
                await asyncio.sleep(0.05)
        if frame is not None:  # what this server offers, whichever instance stored the rest
            frame.models, frame.notice = self.settings.offered_models, DEMO_NOTICE if self.settings.demo else None
        return frame


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
