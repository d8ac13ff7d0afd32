"""Checks a `message` frame and turns it into a turn: the user's message in both histories'
forms, the model, the tools offered (and which one is forced), and the runner that drives it.

Canvas requests are routed here, deterministically: a highlight forces `update_artifact` on
exactly that span, a quick action forces `rewrite_artifact` with its instructions. A button
never becomes a chat reply.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .loop import Turn
from .memory import render_memories
from .prompting import artifact_block, highlight_block, system_blocks
from .prompts import SYSTEM_PROMPT
from .protocol import Highlight, MessageIn, QuickAction, VisibleMessage
from .quick_actions import QuickActionError, fits, instructions, label
from .rejection import FrameRejected
from .runner import TurnRunner, new_id

if TYPE_CHECKING:
    from .canvas import Canvas
    from .hub import Hub
    from .live import LiveConversation

RECENT_MESSAGES = 5  # what a custom quick action with includeRecentHistory shows of the history


@dataclass(slots=True)
class Plan:
    """What kind of turn a message asks for."""

    request: str  # the user's ask as the model reads it
    visible: str  # the user's message as the visible history shows it
    tool_choice: dict[str, Any] | None = None
    highlight: Highlight | None = None
    window: int | None = None
    prefix: bool = True
    reflections: bool = True


def _check_highlight(canvas: "Canvas", highlight: Highlight, text: str) -> Plan:
    version = canvas.current
    if version is None:
        raise FrameRejected("invalid_highlight", "There is no artifact to highlight in this conversation.")
    if not 0 <= highlight.start < highlight.end <= len(version.content):
        raise FrameRejected("invalid_highlight", f"The highlight [{highlight.start}, {highlight.end}) is outside "
                                                 f"the current version ({len(version.content)} characters).")
    if highlight.selected_text is not None and version.content[highlight.start:highlight.end] != highlight.selected_text:
        raise FrameRejected("invalid_highlight", "`selectedText` does not match the current version at that span.")
    if not text:
        raise FrameRejected("empty_message", "Say what to do with the highlighted text.")
    return Plan(request=text, visible=text, highlight=highlight,
                tool_choice={"type": "tool", "name": "update_artifact"})


async def _check_quick_action(hub: "Hub", live: "LiveConversation", action: QuickAction, text: str) -> Plan:
    version = live.canvas.current
    if version is None:
        raise FrameRejected("no_artifact", "Quick actions need an artifact, and this conversation has none.")
    force = {"type": "tool", "name": "rewrite_artifact"}
    visible = text or label(action)
    if action.name == "custom":
        if not action.id:
            raise FrameRejected("invalid_frame", "A custom quick action needs its `id`.")
        saved = await hub.store.get_quick_action(live.owner, action.id)
        if saved is None:
            raise FrameRejected("not_found", "No custom quick action with that id.")
        request = saved.prompt + (f"\n\nThe user adds: {text}" if text else "")
        return Plan(request=request, visible=text or f"[Quick action: {saved.title}]", tool_choice=force,
                    window=RECENT_MESSAGES if saved.include_recent_history else 0,
                    prefix=saved.include_prefix, reflections=saved.include_reflections)
    if not fits(action, version.type):
        kind = "text" if version.type == "code" else "code"
        raise FrameRejected("no_artifact", f"The {action.name} quick action works on {kind} artifacts; "
                                           f"this one is {version.type}.")
    try:
        request = instructions(action, version.language)
    except QuickActionError as exc:
        raise FrameRejected("invalid_frame", str(exc)) from None
    return Plan(request=request + (f"\n\nThe user adds: {text}" if text else ""), visible=visible, tool_choice=force)


async def _plan(hub: "Hub", live: "LiveConversation", message: MessageIn) -> Plan:
    canvas_request = message.canvas
    text = message.content.strip()
    highlight = canvas_request.highlight if canvas_request else None
    action = canvas_request.quick_action if canvas_request else None
    if highlight is not None and action is not None:
        raise FrameRejected("invalid_frame", "A message carries a highlight or a quick action, not both.")
    if action is not None:
        return await _check_quick_action(hub, live, action, text)
    if highlight is not None:
        return _check_highlight(live.canvas, highlight, text)
    if not text:
        raise FrameRejected("empty_message", "The message is empty.")
    return Plan(request=message.content, visible=message.content)


def _model_content(live: "LiveConversation", plan: Plan, attached: list[dict[str, Any]]) -> list[dict[str, Any]]:
    blocks = list(attached)
    canvas, version = live.canvas, live.canvas.current
    if plan.highlight is not None and version is not None:
        return [*blocks, highlight_block(version, plan.highlight, plan.request)]
    # The model sees the current version whenever it has not seen it whole since it changed
    # (or since a summary or clear may have taken it out of the history).
    epoch = live.manager.epoch
    if version is not None and (plan.window is not None or (canvas.shown_index, canvas.shown_epoch) != (version.index, epoch)):
        blocks.append(artifact_block(version))
        if plan.window is None:
            canvas.shown_index, canvas.shown_epoch = version.index, epoch
    return [*blocks, {"type": "text", "text": plan.request}]


def tool_names(hub: "Hub", message: MessageIn) -> list[str]:
    wanted = message.settings
    names = hub.agent.registry.enabled()
    if not wanted.web_search:
        names = [n for n in names if n != "web_search"]
    if not wanted.enable_deep_research:
        names = [n for n in names if n != "deep_research"]
    return names


async def prepare_turn(hub: "Hub", live: "LiveConversation",
                       message: MessageIn) -> tuple[TurnRunner, VisibleMessage, list[dict[str, Any]]]:
    plan = await _plan(hub, live, message)
    settings = hub.settings
    model = message.settings.model or settings.model
    if model not in settings.models:
        raise FrameRejected("invalid_frame", f"Model {model!r} is not available here; choose one of: "
                                             + ", ".join(settings.models))
    attached = await hub.attachments.prepare(live.owner, live.id, message.attachments)
    memories = await hub.memories.load(live.owner)
    tools = hub.agent.registry.schemas(tool_names(hub, message))
    system = system_blocks(SYSTEM_PROMPT, prefix=plan.prefix,
                           memories=render_memories(memories) if plan.reflections else None)
    live.manager.estimate_overhead(lambda: hub.counter.text(json.dumps(system)) + hub.counter.text(json.dumps(tools)))
    turn = Turn(owner=live.owner, conversation_id=live.id, model=model, system=system, tools=tools,
                thinking=message.settings.thinking and plan.tool_choice is None,  # the API refuses both at once
                tool_choice=plan.tool_choice, window=plan.window,
                services={"canvas": live.canvas, "memory": hub.memories.for_user(live.owner),
                          "highlight": plan.highlight, "files": hub.files.scoped(live.owner, live.id),
                          "documents": hub.documents, "model": hub.agent.model})
    user = VisibleMessage(id=new_id("msg"), role="user", content=plan.visible, created_at=time.time(),
                          attachments=attached.visible)
    return TurnRunner(live, hub.agent, turn), user, _model_content(live, plan, attached.blocks)
