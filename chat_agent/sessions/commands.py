"""Client commands, wherever the conversation runs: on this instance when it owns the
conversation (taking it when nobody does), else forwarded to the instance that does, which
runs it and answers. The hub finds the conversations; this routes what clients ask of them.

Rejections: a malformed frame is answered to its sender only (`for_sender`); any other
refusal is news for everyone on the conversation and published in it by the owner (and,
with `echo`, raised to the caller too).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from chat_agent.protocol import (AbortIn, AnyClientFrame, ApproveIn, ClearContextIn, EditArtifactIn, ErrorFrame,
                                 MessageIn, SelectArtifactVersionIn, client_frames)
from chat_agent.rejection import FrameRejected
from chat_agent.sessions.bus import Bus
from chat_agent.sessions.jobs import ConversationJobs
from chat_agent.sessions.live import LiveConversation
from chat_agent.sessions.ownership import Answer, OwnerUnreachable, Ownership
from chat_agent.sessions.queue import Job
from chat_agent.tracing import attached, extract, forward_span, inject

log = logging.getLogger(__name__)

# Codes that answer a malformed frame: only the socket that sent it is told. Any other
# rejection is news for everyone on the conversation, published in its event log.
LOCAL_CODES = frozenset({"invalid_frame", "unknown_type", "empty_message", "too_large"})
# A lease released or expired between looking and forwarding: look again, a little later.
CLAIM_ATTEMPTS = 20
CLAIM_RETRY = 0.05
UNREACHABLE = "The server instance running this conversation does not answer; try again in a few seconds."


def for_sender(exc: FrameRejected) -> bool:
    """A refusal only the socket that sent the frame is told of (a malformed frame, an
    answer to an approval nobody asked for); others are published in the conversation."""
    return exc.only_sender or exc.code in LOCAL_CODES


class Host(Protocol):
    """What commands need of the hub that holds the open conversations."""

    bus: Bus
    ownership: Ownership
    jobs: ConversationJobs

    def live(self, owner: str, conversation_id: str) -> LiveConversation | None: ...
    async def open(self, owner: str, conversation_id: str) -> LiveConversation | None: ...
    async def own(self, live: LiveConversation) -> bool: ...
    async def claim(self, live: LiveConversation) -> tuple[bool, str | None]: ...
    def owner_of(self, conversation_id: str) -> str | None: ...
    def release(self, live: LiveConversation) -> None: ...
    def start_turn(self, live: LiveConversation, message: MessageIn) -> asyncio.Task[None] | None: ...
    async def clear(self, live: LiveConversation) -> None: ...
    async def select_version(self, live: LiveConversation, index: int) -> None: ...
    def edit_artifact(self, live: LiveConversation, content: str, title: str | None) -> None: ...


class Commands:
    def __init__(self, hub: Host):
        self.hub = hub

    async def command(self, live: LiveConversation, frame: AnyClientFrame, *,
                      echo: bool = False) -> asyncio.Task[None] | None:
        """Runs a client's command on the instance that owns the conversation: this one (taking
        it if nobody holds it) or the holder, which the command is forwarded to. Raises
        FrameRejected for the socket that sent it; rejections everyone should see are
        published in the conversation by the owner.

        A `message` returns as soon as the conversation is busy with it (so that an `abort`
        read next finds it): with the task that prepares the turn, or that waits for the
        owner's answer, which a FrameRejected may still end.

        `echo`: a refusal published in the conversation is raised to the caller as well (a
        caller that is not one of its sockets, like an AG-UI run, learns of it only so)."""
        owner = self.hub.owner_of(live.id)
        if owner is not None and live.running and not self.hub.ownership.holds(live.id):
            # A turn runs elsewhere and its frames say where: straight there (an `abort` above
            # all), without asking the database first. Not the owner any more: see `_forward`.
            return await self._send_on(live, owner, frame, echo)
        for _ in range(CLAIM_ATTEMPTS):
            owned, holder = await self.hub.claim(live)
            if owned:
                return await self._execute(live, frame, echo)
            if holder is None:
                await asyncio.sleep(CLAIM_RETRY)
                continue  # released meanwhile: take it
            if not self.hub.bus.shared:
                raise FrameRejected("busy", "Another server instance runs this conversation, and it cannot be "
                                            "reached from here (no bus is configured); try again later.")
            return await self._send_on(live, holder, frame, echo)
        raise FrameRejected("internal", UNREACHABLE)

    async def _send_on(self, live: LiveConversation, holder: str, frame: AnyClientFrame,
                       echo: bool) -> asyncio.Task[None] | None:
        forward = self._forward(live, holder, frame, echo)
        if isinstance(frame, MessageIn):
            return asyncio.get_running_loop().create_task(forward, name=f"forward:{live.id}")
        await forward
        return None

    async def _forward(self, live: LiveConversation, holder: str, frame: AnyClientFrame, echo: bool) -> None:
        # The command's span here is the parent of the owner's turn: one trace across both.
        with forward_span(frame.type, live.id):
            await self._forward_traced(live, holder, frame, echo)

    async def _forward_traced(self, live: LiveConversation, holder: str, frame: AnyClientFrame, echo: bool) -> None:
        message = {"c": live.id, "u": live.owner, "trace": inject(), "echo": echo,
                   "frame": frame.model_dump(mode="json", by_alias=True, exclude_unset=True)}
        for _ in range(CLAIM_ATTEMPTS):
            try:
                answer = await self.hub.ownership.forward(holder, message)
            except OwnerUnreachable:
                raise FrameRejected("internal", UNREACHABLE) from None
            if answer.status == "ok":
                return
            if answer.status == "rejected":
                raise FrameRejected(answer.code, answer.message)  # type: ignore[arg-type]
            # "not_owner": it let the conversation go meanwhile; take it, or find its new owner
            await asyncio.sleep(CLAIM_RETRY)
            owned, new_holder = await self.hub.claim(live)
            if owned:
                task = await self._execute(live, frame, echo)
                if task is not None:
                    await self._outcome(task)
                return
            holder = new_holder or holder
        raise FrameRejected("internal", UNREACHABLE)

    async def forwarded(self, message: dict) -> Answer:
        """A command another instance forwarded here, as the owner; answered once done (a
        message: once its turn started)."""
        conversation_id, owner = message.get("c", ""), message.get("u", "")
        if not self.hub.ownership.holds(conversation_id):
            return Answer("not_owner")
        if "job" in message:  # a background job, handed to the owner (`forward_job`)
            job = Job(message["job"], owner, conversation_id)
            try:
                await self.hub.jobs.run(job)
            except Exception:  # it ran, and failed: told here, not run again
                log.exception("background job %s failed", job.key)
            return Answer("ok")
        live = self.hub.live(owner, conversation_id) or await self.hub.open(owner, conversation_id)
        if live is None:
            return Answer("rejected", "not_found", "No such conversation.")
        try:
            # Opening it waited: the lease may have been given back meanwhile (nothing used the
            # conversation here), and a command run without it would have its writes refused.
            if not await self.hub.own(live):
                return Answer("not_owner")
            with attached(extract(message.get("trace"))):  # the turn it starts joins the sender's trace
                task = await self._execute(live, client_frames.validate_python(message["frame"]),
                                           bool(message.get("echo")))
            if task is not None:
                await self._outcome(task)
        except FrameRejected as exc:
            if for_sender(exc) or message.get("echo"):
                return Answer("rejected", exc.code, exc.message)
            # published in the conversation already: its sender sees it there
        finally:
            self.hub.release(live)
        return Answer("ok")

    @staticmethod
    async def _outcome(task: asyncio.Task[None]) -> None:
        """Waits for a message's preparation; raises what refused it (nothing if aborted)."""
        await asyncio.wait([task])
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]

    async def _execute(self, live: LiveConversation, frame: AnyClientFrame,
                       echo: bool = False) -> asyncio.Task[None] | None:
        """A command, here where the conversation is owned; a message's preparation task."""
        try:
            match frame:
                case MessageIn():
                    task = self.hub.start_turn(live, frame)
                    if task is not None:
                        task.add_done_callback(lambda done: self._publish_refusal(live, done))
                    return task
                case AbortIn():
                    await live.abort()
                case ApproveIn(tool_id=tool_id, approved=approved, message=message):
                    if not live.approve(tool_id, approved, message):
                        raise FrameRejected("not_found", f"No tool call waits for approval under {tool_id!r} "
                                                         "(it was answered already, timed out, or never asked).", only_sender=True)
                case ClearContextIn():
                    await self.hub.clear(live)
                case SelectArtifactVersionIn(index=index):
                    await self.hub.select_version(live, index)
                case EditArtifactIn(content=content, title=title):
                    self.hub.edit_artifact(live, content, title)
                case _:
                    raise TypeError(f"not a command: {frame!r}")
        except FrameRejected as exc:
            if for_sender(exc):
                raise
            live.publish(ErrorFrame(code=exc.code, message=exc.message))
            if echo:
                raise
        return None

    @staticmethod
    def _publish_refusal(live: LiveConversation, task: asyncio.Task[None]) -> None:
        """A message refused while its turn was prepared: everyone is told, unless only the
        sender is concerned (a malformed frame)."""
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, FrameRejected) and not for_sender(exc):
            live.publish(ErrorFrame(code=exc.code, message=exc.message))
