"""Client commands, wherever the conversation runs: on this instance when it owns the
conversation (taking it when nobody does), else forwarded to the instance that does, which
runs it and answers.

Rejections: a malformed frame is answered to its sender only (`for_sender`); any other
refusal is news for everyone on the conversation and published in it by the owner (and,
with `echo`, raised to the caller too).
"""

from __future__ import annotations

import asyncio
import logging

from chat_agent.agent.loop import Agent
from chat_agent.config import Settings
from chat_agent.protocol import (AbortIn, AnyClientFrame, ApproveIn, ClearContextIn, EditArtifactIn, ErrorFrame,
                                 MessageIn, RegenerateIn, RenameIn, ReviewDecisionIn, SelectArtifactVersionIn,
                                 ToolResultIn,
                                 SwitchBranchIn, client_frames)
from chat_agent.rejection import FrameRejected
from chat_agent.sessions.branches import Branches
from chat_agent.sessions.forwarding import Forwarder, OwnerUnreachable
from chat_agent.sessions.jobs import ConversationJobs
from chat_agent.sessions.live import LiveConversation
from chat_agent.sessions.messages import Answer, Command, Request, RunJob
from chat_agent.sessions.prepare import TurnPreparer
from chat_agent.sessions.queue import Job
from chat_agent.sessions.registry import CLAIM_ATTEMPTS, CLAIM_RETRY, Registry
from chat_agent.sessions.turn import Outcome, Prepared, RunningTurn
from chat_agent.tracing import attached, extract, forward_span, inject
from chat_agent.urgency import LONGEST_PAUSE

log = logging.getLogger(__name__)

# Codes that answer a malformed frame: only the socket that sent it is told. Any other
# rejection is news for everyone on the conversation, published in its event log.
LOCAL_CODES = frozenset({"invalid_frame", "unknown_type", "empty_message", "too_large"})
UNREACHABLE = "The server instance running this conversation does not answer; try again in a few seconds."
BUSY = "A turn is already running in this conversation; wait for done or abort it."
RELOADED = "This conversation was just reloaded on the server; send the message again."


def for_sender(exc: FrameRejected) -> bool:
    """A refusal only the socket that sent the frame is told of (a malformed frame, an
    answer to an approval nobody asked for, a refusal an owner elsewhere answered); others
    are published in the conversation."""
    return exc.only_sender or exc.code in LOCAL_CODES


class Commands:
    def __init__(self, settings: Settings, agent: Agent, registry: Registry, forwarder: Forwarder,
                 jobs: ConversationJobs, preparer: TurnPreparer):
        self._settings = settings
        self._agent = agent
        self._registry = registry
        self._ownership = registry.ownership
        self._bus = registry.bus
        self._forwarder = forwarder
        self._jobs = jobs
        self._preparer = preparer
        self._branches = Branches(registry.store, registry.writer)

    async def command(self, live: LiveConversation, frame: AnyClientFrame, *,
                      echo: bool = False) -> asyncio.Future[object] | None:
        """Runs a client's command on the instance that owns the conversation: this one (taking
        it if nobody holds it) or the holder, which the command is forwarded to. Raises
        FrameRejected for the socket that sent it; rejections everyone should see are
        published in the conversation by the owner.

        A `message` returns as soon as the conversation is busy with it (so that an `abort`
        read next finds it): with a future that ends once its turn started or was refused
        (its FrameRejected, for the sender when `for_sender` says so).

        `echo`: a refusal published in the conversation is raised to the caller as well (a
        caller that is not one of its sockets, like an AG-UI run, learns of it only so)."""
        follower = live.follower
        if follower is not None and follower.instance is not None and follower.running \
                and not self._ownership.holds(live.id):
            # A turn runs elsewhere and its frames say where: straight there (an `abort` above
            # all), without asking the database first. Not the owner any more: see `_forward`.
            return await self._send_on(live, follower.instance, frame, echo)
        for _ in range(CLAIM_ATTEMPTS):
            owned, holder = await self._registry.claim(live)
            if owned:
                return await self._execute(live, frame, echo)
            if holder is None:
                await asyncio.sleep(CLAIM_RETRY)
                continue  # released meanwhile: take it
            if not self._bus.shared:
                raise FrameRejected("busy", "Another server instance runs this conversation, and it cannot be "
                                            "reached from here (no bus is configured); try again later.")
            return await self._send_on(live, holder, frame, echo)
        raise FrameRejected("internal", UNREACHABLE)

    async def _send_on(self, live: LiveConversation, holder: str, frame: AnyClientFrame,
                       echo: bool) -> asyncio.Future[object] | None:
        forward = self._forward(live, holder, frame, echo)
        if isinstance(frame, (MessageIn, RegenerateIn)):
            return asyncio.get_running_loop().create_task(forward, name=f"forward:{live.id}")
        await forward
        return None

    async def _forward(self, live: LiveConversation, holder: str, frame: AnyClientFrame, echo: bool) -> None:
        # The command's span here is the parent of the owner's turn: one trace across both.
        with forward_span(frame.type, live.id):
            try:
                await self._forward_traced(live, holder, frame, echo)
            except FrameRejected as exc:  # the owner published what everyone should see
                raise FrameRejected(exc.code, exc.message, only_sender=True) from None

    async def _forward_traced(self, live: LiveConversation, holder: str, frame: AnyClientFrame, echo: bool) -> None:
        request = Command(id=self._forwarder.request_id(), sender=self._bus.instance, conversation=live.id,
                          user=live.owner, trace=inject(), echo=echo,
                          frame=frame.model_dump(mode="json", by_alias=True, exclude_unset=True))
        for _ in range(CLAIM_ATTEMPTS):
            try:
                answer = await self._forwarder.ask(holder, request)
            except OwnerUnreachable:
                # What said it owns the conversation (its lease, the frames followed here) may
                # be a dead instance's: forget it, and take the conversation if it is free now.
                if live.follower is not None:
                    live.follower.doubt()
                owned, new_holder = await self._registry.claim(live)
                if owned:
                    return await self._run_here(live, frame, echo)
                if new_holder is None or new_holder == holder:
                    raise FrameRejected("internal", UNREACHABLE) from None
                holder = new_holder
                continue
            if answer.status == "ok":
                return
            if answer.status == "rejected":
                raise FrameRejected(answer.code, answer.message)  # type: ignore[arg-type]
            # "not_owner": it let the conversation go meanwhile; take it, or find its new owner
            await asyncio.sleep(CLAIM_RETRY)
            owned, new_holder = await self._registry.claim(live)
            if owned:
                return await self._run_here(live, frame, echo)
            holder = new_holder or holder
        raise FrameRejected("internal", UNREACHABLE)

    async def _run_here(self, live: LiveConversation, frame: AnyClientFrame, echo: bool) -> None:
        """A forwarded command that this instance took over: run here, a message until its turn started."""
        started = await self._execute(live, frame, echo)
        if started is not None:
            await _outcome(started)

    async def answer(self, request: Request) -> None:
        """Runs a request another instance sent here, as the owner, and answers it once done
        (a message: once its turn started)."""
        try:
            answer = (await self._serve(request)).model_copy(update={"id": request.id})
        except Exception:
            log.exception("a forwarded command failed")
            answer = Answer(id=request.id, status="rejected", code="internal",
                            message="The server failed to handle that frame.")
        try:
            await self._bus.send(request.sender, answer)
        except Exception as exc:
            log.warning("could not answer a command forwarded by %s: %s", request.sender, exc)

    async def _serve(self, request: Request) -> Answer:
        if not self._ownership.holds(request.conversation):
            return Answer(status="not_owner")
        if isinstance(request, RunJob):  # a background job, handed to the owner (`forward_job`)
            job = Job(request.job, request.user, request.conversation)
            try:
                await self._jobs.run(job)
            except Exception:  # it ran, and failed: told here, not run again
                log.exception("background job %s failed", job.key)
            return Answer(status="ok")
        registry = self._registry
        live = registry.live(request.user, request.conversation) or await registry.open(request.user,
                                                                                       request.conversation)
        if live is None:
            return Answer(status="rejected", code="not_found", message="No such conversation.")
        try:
            # Opening it waited: the lease may have been given back meanwhile (nothing used the
            # conversation here), and a command run without it would have its writes refused.
            if not await registry.own(live):
                return Answer(status="not_owner")
            with attached(extract(request.trace)):  # the turn it starts joins the sender's trace
                started = await self._execute(live, client_frames.validate_python(request.frame), request.echo)
            if started is not None:
                await _outcome(started)
        except FrameRejected as exc:
            if for_sender(exc) or request.echo:
                return Answer(status="rejected", code=exc.code, message=exc.message)
            # published in the conversation already: its sender sees it there
        finally:
            registry.release(live)
        return Answer(status="ok")

    async def _execute(self, live: LiveConversation, frame: AnyClientFrame,
                       echo: bool = False) -> asyncio.Future[object] | None:
        """A command, here where the conversation is owned; a message's started future."""
        try:
            match frame:
                case MessageIn() | RegenerateIn():
                    if frame.id is not None and live.busy and await self._registry.store.has_client_message_id(
                            live.owner, live.id, frame.id):
                        return None  # a retry of the message whose turn runs (continued here): ignored
                    return self._start_turn(live, frame)
                case SwitchBranchIn(message_id=message_id):
                    await self._branches.switch(live, message_id)
                case RenameIn(title=title):
                    live.set_title(title)
                case AbortIn():
                    with self._agent.urgency.first(stop=True):  # the streams of other turns wait meanwhile,
                        await live.abort()  # until its `done` is stored and handed to the sockets
                        await live.shown_through(live.seq, LONGEST_PAUSE)
                case ApproveIn(tool_id=tool_id, approved=approved, message=message):
                    if not live.approve(tool_id, approved, message):
                        raise FrameRejected("not_found", f"No tool call waits for approval under {tool_id!r} "
                                                         "(it was answered already, timed out, or never asked).",
                                            only_sender=True)
                case ReviewDecisionIn(review_id=review_id, decision=decision, message=message):
                    if not live.decide_review(review_id, decision, message):
                        raise FrameRejected("not_found", f"No review waits for a decision under {review_id!r} "
                                                         "(it was decided already, timed out, or never asked).",
                                            only_sender=True)
                case ToolResultIn(tool_id=tool_id, content=content, is_error=is_error):
                    if not live.answer_call(tool_id, content, is_error):
                        raise FrameRejected("not_found", f"No call to a client's tool waits for its result under "
                                                         f"{tool_id!r} (answered already, timed out, or never made).",
                                            only_sender=True)
                case ClearContextIn():
                    await live.abort()
                    live.clear()
                case SelectArtifactVersionIn(index=index):
                    await self._select_version(live, index)
                case EditArtifactIn(content=content, title=title):
                    self._edit_artifact(live, content, title)
                case _:
                    raise TypeError(f"not a command: {frame!r}")
        except FrameRejected as exc:
            if for_sender(exc):
                raise
            live.publish(ErrorFrame(code=exc.code, message=exc.message))
            if echo:
                raise
        return None

    # ---- a turn -------------------------------------------------------------------------------

    def _start_turn(self, live: LiveConversation, message: MessageIn | RegenerateIn) -> asyncio.Future[object] | None:
        """Starts the turn a `message` asks for: returns a future that ends once it started,
        with the FrameRejected that refused it, or None for a message already seen. The
        conversation is busy from this call on, so the frames after this one (an `abort`,
        another message) are read meanwhile."""
        if message.id is not None and live.knows_message(message.id):
            return None  # a client retrying a message it already sent: ignored, as PROTOCOL.md says
        unavailable = self._agent.model.unavailable(message.settings.model or self._settings.model)
        if unavailable is not None:  # no key for that model's provider: said before anything is stored
            raise FrameRejected("llm_error", unavailable)
        if live.busy:
            raise FrameRejected("busy", BUSY)
        if not self._registry.keep(live):  # let go and opened again since this copy was found: told
            # to its sender alone, since a frame published here would take a seq the copy in use has
            raise FrameRejected("busy", RELOADED, only_sender=True)
        started: asyncio.Future[object] = asyncio.get_running_loop().create_future()

        async def prepare() -> Prepared | None:
            try:
                prepared = await self._prepare(live, message)
            except BaseException as exc:
                if not started.done():
                    started.cancel() if isinstance(exc, asyncio.CancelledError) else started.set_exception(exc)
                raise
            if not started.done():
                started.set_result(None)
            return prepared

        turn = RunningTurn.start(live, self._agent, prepare)
        live.begin(turn)
        self._registry.spawn(self._after(live, turn, started), f"after-turn:{live.id}")
        return started

    async def _prepare(self, live: LiveConversation, message: MessageIn | RegenerateIn) -> Prepared | None:
        if message.id is not None and await self._registry.store.has_client_message_id(live.owner, live.id,
                                                                                       message.id):
            return None
        if isinstance(message, RegenerateIn):  # a branch (PROTOCOL 1.2 trees): see branches.py
            await self._branches.regenerate(live, message)
            prepared = await self._preparer.prepare_again(live, message.settings)
        else:
            if message.edit_of is not None:
                await self._branches.edit(live, message)
            prepared = await self._preparer.prepare(live, message)
        await live.load()  # the last wait: from here on the turn starts without a pause
        if message.id is not None:
            live.remember_message(message.id)
        return prepared

    async def _after(self, live: LiveConversation, turn: RunningTurn, started: asyncio.Future[object]) -> None:
        """Once the turn is over: a refusal everyone should know of is published, the
        background jobs a turn asks for are queued, and the conversation may be let go."""
        task = turn.task
        await asyncio.wait([task])
        if task.cancelled():  # aborted before it could even begin
            started.cancel()
        elif isinstance(task.exception(), FrameRejected):
            exc: FrameRejected = task.exception()  # type: ignore[assignment]
            if not for_sender(exc):
                live.publish(ErrorFrame(code=exc.code, message=exc.message))
        elif task.exception() is None and task.result().started:
            outcome: Outcome = task.result()
            try:
                self._jobs.after_turn(live, outcome.stop, outcome.artifact_changed)
            except Exception:
                log.exception("after-turn jobs failed")
        self._registry.release(live)

    # ---- the canvas, between turns ----------------------------------------------------------

    async def _select_version(self, live: LiveConversation, index: int) -> None:
        _check_canvas_idle(live)
        canvas = live.canvas
        if canvas.current is None:
            raise FrameRejected("no_artifact", "This conversation has no artifact.")
        if not 1 <= index <= canvas.version_count:
            raise FrameRejected("not_found", f"The artifact has versions 1 to {canvas.version_count}.")
        await self._registry.writer.flush()  # a version added a moment ago must be readable
        version = await self._registry.store.get_artifact_version(live.owner, live.id, index)
        if version is None:
            raise FrameRejected("not_found", f"Version {index} of the artifact was not found.")
        canvas.select(index, version)
        live.announce_canvas()

    def _edit_artifact(self, live: LiveConversation, content: str, title: str | None) -> None:
        """The user's own edit in the canvas becomes a new version."""
        _check_canvas_idle(live)
        current = live.canvas.current
        if current is None:
            raise FrameRejected("no_artifact", "This conversation has no artifact to edit.")
        live.canvas.add_version(type=current.type, title=title or current.title, language=current.language,
                                content=content, source="user")
        live.announce_canvas()
        self._jobs.reflect_later(live)


def _check_canvas_idle(live: LiveConversation) -> None:
    if live.busy:
        raise FrameRejected("busy", "The agent is working on the artifact; wait for done or abort the turn.")


async def _outcome(started: asyncio.Future[object]) -> None:
    """Waits for a message's start; raises what refused it (nothing if aborted)."""
    await asyncio.wait([started])
    if not started.cancelled() and started.exception() is not None:
        raise started.exception()  # type: ignore[misc]
