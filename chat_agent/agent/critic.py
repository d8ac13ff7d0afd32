"""The critic loop (PROTOCOL 1.2 "Review"): a turn, reviewed, and revised while it fails.

Wraps the ReAct loop (`run_turn`) without changing it. When the loop ends well and the
turn changed the artifact or made an image, the reviewer judges the result (`review`). A
failed verdict with revisions left either goes back to the model at once, as a message
carrying the feedback (`decision: "auto"`), or first waits for the user (`"ask"`): revise,
or accept the result as it is. All of it is one turn: one `TurnFinished`, whose usage adds
the reviews' calls to the turn's own.

A review that cannot be made (the reviewer's call failed, its verdict was not valid) does
not fail the turn: the result stands, unreviewed, and the log says why.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from contextlib import aclosing
from typing import Any, AsyncIterator

from chat_agent.agent.events import (ArtifactChanged, ContextChanged, Event, ModelWaiting, ReviewAnswered, ReviewAsked,
                                     Reviewed, ToolEnded, TurnFinished)
from chat_agent.agent.loop import Agent, Turn, run_turn
from chat_agent.agent.review import ReviewFailed, Subject, review
from chat_agent.context.conversation import ConversationManager
from chat_agent.files.images import image_block, prepare_image
from chat_agent.ids import new_id
from chat_agent.protocol import ArtifactTarget, ImageTarget, Usage

log = logging.getLogger(__name__)

REVISE = """[Review of your result, {label}: not passed (score {score:.2f}).]
Feedback: {feedback}{suggestions}{said}

Revise the result to address this review: change the artifact or make a new image with your tools, then say briefly what you changed."""


async def run_reviewed(agent: Agent, conv: ConversationManager, turn: Turn, *, start: int | None = None,
                       rerun: list[dict[str, Any]] | None = None) -> AsyncIterator[Event]:
    """`run_turn`, then reviews and revisions as `turn.review` says (just `run_turn` without it).
    `start` and `rerun` are a continued turn's (see `run_turn`), for its first round only: a
    turn continued after a failure is reviewed on what it makes from there on."""
    policy = turn.review
    if policy is None:
        async with aclosing(run_turn(agent, conv, turn, start=start, rerun=rerun)) as events:
            async for event in events:
                yield event
        return
    at = len(conv.messages) - 1 if start is None else start
    request = _request_text(conv.messages[at]) if 0 <= at < len(conv.messages) else ""
    total = Usage()
    revision = 0
    while True:
        canvas = turn.services.canvas
        before = canvas.current if canvas is not None else None
        changed, images = False, []
        finished: TurnFinished | None = None
        async with aclosing(run_turn(agent, conv, turn, start=start, rerun=rerun)) as events:
            async for event in events:
                if isinstance(event, TurnFinished):
                    finished = event
                    continue
                if isinstance(event, ArtifactChanged):
                    changed = True
                elif isinstance(event, ToolEnded) and not event.is_error and isinstance(event.output, dict) \
                        and isinstance(event.output.get("imageId"), str):
                    images.append(event.output["imageId"])
                elif isinstance(event, ContextChanged) and event.usage is not None:
                    # What the turn used so far, the earlier rounds and reviews included.
                    event = dataclasses.replace(event, usage=_sum(total, event.usage))
                yield event
        assert finished is not None, "run_turn always finishes"
        total.add(finished.usage)
        if finished.stop_reason != "end_turn" or not (changed or images):
            yield dataclasses.replace(finished, usage=total)
            return
        review_id = new_id("rev")
        try:
            target, subject = await _subject(turn, request, before, images)
            call = asyncio.create_task(review(agent.model, policy.model, subject), name="review")
            async with aclosing(_waiting(call, agent.settings.status_interval,
                                         agent.settings.model_idle_timeout)) as waits:
                async for waiting in waits:
                    yield waiting
            verdict, used = call.result()
        except ReviewFailed as exc:
            log.warning("%s: no review of this turn: %s", turn.conversation_id, exc)
            if exc.usage is not None:
                total.add(exc.usage)
            yield dataclasses.replace(finished, usage=total)
            return
        total.add(used)
        yield Reviewed(review_id, target, verdict.passed, verdict.score, verdict.feedback, list(verdict.suggestions),
                       revision)
        if verdict.passed or revision >= policy.max_revisions:
            yield dataclasses.replace(finished, usage=total)
            return
        said = None
        if policy.decision == "ask":
            yield ReviewAsked(review_id)
            answer = await policy.gate.wait(review_id)
            yield ReviewAnswered(review_id, answer.decision, answer.message, answer.reason)
            if answer.decision == "accept":
                yield dataclasses.replace(finished, usage=total)
                return
            said = answer.message
        revision += 1
        start, rerun = None, None
        conv.add_user(_feedback(target, verdict.score, verdict.feedback, verdict.suggestions, said))
        # The revision reads the feedback: a forced first call (a quick action's rewrite, a
        # highlight's span edit with only the excerpt) would not.
        turn = dataclasses.replace(turn, tool_choice=None, focus=None)


async def _waiting(call: asyncio.Task[Any], every: float, idle: float) -> AsyncIterator[ModelWaiting]:
    """Says at a steady pace that the reviewer has not answered yet (its call is silence for
    the user, like any model call), and gives it up after `idle` seconds (ReviewFailed). The
    call is cancelled if the turn stops meanwhile."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        while True:
            await asyncio.wait({call}, timeout=every)
            if call.done():
                return
            if loop.time() - started >= idle:
                raise ReviewFailed(f"the reviewer sent nothing for {idle:g} s")
            yield ModelWaiting(loop.time() - started)
    finally:
        if not call.done():
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)


async def _subject(turn: Turn, request: str, before: Any, images: list[str]
                   ) -> tuple[ArtifactTarget | ImageTarget, Subject]:
    services = turn.services
    memories = services.memory.current() if services.memory is not None else None
    if images:  # what the turn made last is what the user looks at
        if services.files is None:
            raise ReviewFailed("no files to read the image from")
        file_id = images[-1]
        try:
            stored, data = await services.files.read(file_id)
            shown = await asyncio.to_thread(prepare_image, data)
        except Exception as exc:  # noqa: BLE001 - an unreadable image means no review, not a failed turn
            raise ReviewFailed(f"could not read image {file_id}: {exc}") from None
        return ImageTarget(file_id=file_id), Subject(request, memories, image=image_block(shown),
                                                     image_label=stored.label)
    canvas = services.canvas
    after = canvas.current if canvas is not None else None
    if after is None:
        raise ReviewFailed("the artifact is gone")
    return ArtifactTarget(index=after.index), Subject(request, memories, before=before, after=after)


def _feedback(target: ArtifactTarget | ImageTarget, score: float, feedback: str, suggestions: list[str],
              said: str | None) -> str:
    label = f"version {target.index} of the artifact" if isinstance(target, ArtifactTarget) \
        else f"image {target.file_id}"
    listed = "".join(f"\n- {s}" for s in suggestions)
    return REVISE.format(label=label, score=score, feedback=feedback,
                         suggestions=f"\nSuggestions:{listed}" if listed else "",
                         said=f"\nThe user asks for the revision, saying: {said}" if said else "")


def _request_text(message: dict[str, Any]) -> str:
    """The user's words in the message that started the turn: its last text block (what the
    turn adds before them, such as the artifact or attachments, is context)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    texts = [b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]
    return texts[-1] if texts else ""


def _sum(a: Usage, b: Usage) -> Usage:
    total = a.model_copy()
    total.add(b)
    return total
