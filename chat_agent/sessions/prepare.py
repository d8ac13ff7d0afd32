"""Checks a `message` frame and turns it into a turn: the user's message in both histories'
forms, the model, the tools offered (and which one is forced), and the services tools get.

Canvas requests are routed here, deterministically: a highlight forces `update_artifact` on
exactly that span, a quick action forces `rewrite_artifact` with its instructions. A button
never becomes a chat reply.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from chat_agent import clock
from chat_agent.agent.approval import ApprovalGate
from chat_agent.agent.loop import Agent, Turn
from chat_agent.canvas.artifact import Canvas
from chat_agent.canvas.memory import MemoryBook, render_memories
from chat_agent.canvas.quick_actions import QuickActionError, fits, instructions, label
from chat_agent.config import Settings
from chat_agent.context.prompting import artifact_block, artifact_edit_block, highlight_block, system_blocks
from chat_agent.context.prompts import SYSTEM_PROMPT
from chat_agent.context.tokens import TokenCounter, content_chars
from chat_agent.files.attachments import AttachmentReader, DocumentLibrary
from chat_agent.files.catalog import Files
from chat_agent.ids import new_id
from chat_agent.knowledge import Knowledge, KnowledgeError
from chat_agent.knowledge.scope import KnowledgeScope
from chat_agent.protocol import Highlight, MessageIn, QuickAction, VisibleMessage
from chat_agent.rejection import FrameRejected
from chat_agent.sessions.live import LiveConversation
from chat_agent.sessions.turn import Prepared
from chat_agent.store import ArtifactVersionRecord, Store
from chat_agent.tooling import ToolServices

SEARCH_KNOWLEDGE = "search_knowledge"  # offered only when the message names knowledge collections
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


def _check_highlight(canvas: Canvas, highlight: Highlight, text: str) -> Plan:
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


def _model_content(live: LiveConversation, plan: Plan, attached: list[dict[str, Any]]) -> list[dict[str, Any]]:
    blocks = list(attached)
    canvas, version = live.canvas, live.canvas.current
    if plan.highlight is not None and version is not None:
        return [*blocks, highlight_block(version, plan.highlight, plan.request)]
    request = {"type": "text", "text": plan.request}
    # The model sees the current version whenever it does not know it (a change it did not
    # make, or a summary or clear that may have taken it out of the history). A turn with a
    # window of recent history shows it whole regardless, and that does not count.
    if version is not None and plan.window is not None:
        blocks.append(artifact_block(version))
    elif version is not None and canvas.unseen() is not None:
        blocks.append(_change_block(live, version, content_chars([*blocks, request])))
        canvas.mark_seen()
    return [*blocks, request]


def _change_block(live: LiveConversation, version: ArtifactVersionRecord, others: int) -> dict[str, Any]:
    """The current version as an edit of the one the model saw, when that is smaller, so the
    turn adds little after the cached history; else whole. A summary before this turn's first
    call (the history with this message, `others` more characters, past the threshold) would
    take the version the edit applies to out of the history: then only the whole will do."""
    seen = live.canvas.seen()
    edit = artifact_edit_block(seen, version) if seen else None
    if edit is None or live.manager.needs_summary(adding=others + content_chars([edit])):
        return artifact_block(version)
    return edit


class TurnPreparer:
    """Turns a `message` frame into a turn: checks it, reads its attachments, and builds what
    the loop needs. Raises FrameRejected with the reason a client is told."""

    def __init__(self, settings: Settings, agent: Agent, store: Store, files: Files, memories: MemoryBook,
                 counter: TokenCounter, knowledge: Knowledge | None = None):
        self._settings = settings
        self._knowledge = knowledge
        self._agent = agent
        self._store = store
        self._files = files
        self._documents = DocumentLibrary(files)
        self._attachments = AttachmentReader(files, self._documents, settings)
        self._memories = memories
        self._counter = counter

    async def prepare(self, live: LiveConversation, message: MessageIn) -> Prepared:
        """The turn, the user's message as the visible history keeps it, and its content as
        the model reads it."""
        plan = await self._plan(live, message)
        model = self._settings.allowed(message.settings.model or self._settings.model)
        if model is None:
            raise FrameRejected("invalid_frame", f"Model {message.settings.model!r} is not available here; choose one of: "
                                                 + ", ".join(self._settings.models))
        attached = await self._attachments.prepare(live.owner, live.id, message.attachments)
        memories = await self._memories.load(live.owner)
        registry = self._agent.registry
        collections = await self._collections(live.owner, message)
        tools = registry.schemas(self._tool_names(message, bool(collections)))
        system = system_blocks(SYSTEM_PROMPT, prefix=plan.prefix,
                               memories=render_memories(memories) if plan.reflections else None)
        counter = self._counter
        live.manager.estimate_overhead(lambda: counter.text(json.dumps(system)) + counter.text(json.dumps(tools)))
        services = ToolServices(canvas=live.canvas, memory=self._memories.for_user(live.owner, memories),
                                highlight=plan.highlight, files=self._files.scoped(live.owner, live.id),
                                documents=self._documents, model=self._agent.model,
                                knowledge=KnowledgeScope(self._knowledge, live.owner, collections)
                                if self._knowledge is not None else None)
        user = VisibleMessage(id=new_id("msg"), role="user", content=plan.visible, created_at=clock.now(),
                              attachments=attached.visible)
        content = _model_content(live, plan, attached.blocks)
        turn = Turn(owner=live.owner, conversation_id=live.id, model=model, system=system, tools=tools,
                    thinking=message.settings.thinking and plan.tool_choice is None,  # the API refuses both at once
                    tool_choice=plan.tool_choice, window=plan.window, services=services,
                    # The span edit needs only the excerpt: sending the history along with a
                    # forced tool_choice would process all of it again, uncached.
                    focus=content if plan.highlight is not None else None,
                    # a message can add tools to the server's list, never take one off it
                    approvals=ApprovalGate(self._settings.require_approval | set(message.settings.require_approval),
                                           self._settings.approval_timeout))
        return Prepared(turn, user, content)

    async def _collections(self, owner: str, message: MessageIn) -> list[str]:
        """The knowledge collections the message names, all of them the user's."""
        wanted = message.settings.knowledge
        if not wanted:
            return []
        if self._knowledge is None:
            raise FrameRejected("invalid_frame", "This server keeps no knowledge bases (its store is in memory).")
        try:
            return await self._knowledge.owned(owner, wanted)
        except KnowledgeError as exc:
            raise FrameRejected("not_found", f"settings.knowledge: {exc.message}") from None

    def _tool_names(self, message: MessageIn, knowledge: bool = False) -> list[str]:
        wanted = message.settings
        names = self._agent.registry.enabled()
        if not knowledge:
            names = [n for n in names if n != SEARCH_KNOWLEDGE]
        if not wanted.web_search:
            names = [n for n in names if n != "web_search"]
        if not wanted.enable_deep_research:
            names = [n for n in names if n != "deep_research"]
        return names

    async def _plan(self, live: LiveConversation, message: MessageIn) -> Plan:
        canvas_request = message.canvas
        text = message.content.strip()
        highlight = canvas_request.highlight if canvas_request else None
        action = canvas_request.quick_action if canvas_request else None
        if highlight is not None and action is not None:
            raise FrameRejected("invalid_frame", "A message carries a highlight or a quick action, not both.")
        if action is not None:
            return await self._quick_action(live, action, text)
        if highlight is not None:
            return _check_highlight(live.canvas, highlight, text)
        if not text:
            raise FrameRejected("empty_message", "The message is empty.")
        return Plan(request=message.content, visible=message.content)

    async def _quick_action(self, live: LiveConversation, action: QuickAction, text: str) -> Plan:
        version = live.canvas.current
        if version is None:
            raise FrameRejected("no_artifact", "Quick actions need an artifact, and this conversation has none.")
        force = {"type": "tool", "name": "rewrite_artifact"}
        if action.name == "custom":
            if not action.id:
                raise FrameRejected("invalid_frame", "A custom quick action needs its `id`.")
            saved = await self._store.get_quick_action(live.owner, action.id)
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
        return Plan(request=request + (f"\n\nThe user adds: {text}" if text else ""), visible=text or label(action),
                    tool_choice=force)
