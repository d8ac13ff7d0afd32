"""Checks a `message` frame and turns it into a turn: the user's message in both histories'
forms, the model, the tools offered (and which one is forced), and the services tools get.

Canvas requests are routed here, deterministically: a highlight forces `update_artifact` on
exactly that span, a quick action forces `rewrite_artifact` with its instructions. A button
never becomes a chat reply.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from chat_agent import clock
from chat_agent.agent.approval import ApprovalGate
from chat_agent.agent.client_calls import ClientCalls
from chat_agent.agent.review import ReviewGate, ReviewPolicy
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
from chat_agent.protocol import (ClientTool, ContextItem, Highlight, MessageIn, MessageSettings, QuickAction,
                                 ReviewSettings, VisibleMessage)
from chat_agent.rejection import FrameRejected
from chat_agent.sessions.live import LiveConversation
from chat_agent.sessions.turn import Prepared
from chat_agent.store import ArtifactVersionRecord, Store
from chat_agent.tooling import ToolServices

SEARCH_KNOWLEDGE = "search_knowledge"  # offered only when the message names knowledge collections
RECENT_MESSAGES = 5  # what a custom quick action with includeRecentHistory shows of the history


class ReviewSpec(BaseModel):
    """A turn's review settled when it starts (the message's `settings.review` over the
    server's default), kept with its spec so a continued turn is reviewed the same way."""

    model: str
    max_revisions: int = 1
    decision: Literal["auto", "ask"] = "auto"


class TurnSpec(BaseModel):
    """What builds a turn's `Turn` again, stored with the turn when it starts: a turn cut by
    a failure continues from it (sessions/continuation.py) with the same model, tools and
    prompt options, memories read anew."""

    model: str
    thinking: bool = False
    tools: list[str]
    require_approval: list[str] = []
    tool_choice: dict[str, Any] | None = None  # forced on the first call only
    highlight: Highlight | None = None
    focused: bool = False  # the forced call is sent the user's message alone
    window: int | None = None
    prefix: bool = True
    reflections: bool = True
    user_item: str | None = None  # the history item of the turn's message (see `live.open_turn`)
    knowledge: list[str] = []  # the collections `search_knowledge` searches
    review: ReviewSpec | None = None  # 1.2 "Review": how what the turn makes is reviewed; None: it is not
    client_tools: list[ClientTool] = []  # tools the client runs itself (AG-UI `tools`)
    context: list[ContextItem] = []  # what the client tells the model (AG-UI `context`)


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


def _client_schema(tool: ClientTool) -> dict[str, Any]:
    schema = {"type": "object", "properties": {}, **(tool.parameters or {})}  # the API takes object schemas only
    return {"name": tool.name, "description": tool.description or tool.name, "input_schema": schema}


def _context_text(items: list[ContextItem]) -> str:
    """The client's context for the turn, after the cached prompt (it may change every turn)."""
    parts = [f"<context description={json.dumps(item.description, ensure_ascii=False)}>\n{item.value}\n</context>"
             for item in items]
    return "The user's application gives this context for the conversation:\n\n" + "\n\n".join(parts)


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


def review_spec(settings: Settings, asked: ReviewSettings | None) -> ReviewSpec | None:
    """How this turn is reviewed: the message's `settings.review` over the server's default
    (`CHAT_AGENT_REVIEW`); None when it is not."""
    model = settings.review_model or settings.small_model
    if asked is None:
        if settings.review == "off":
            return None
        return ReviewSpec(model=model, max_revisions=settings.review_max_revisions, decision=settings.review)
    if not asked.enabled:
        return None
    return ReviewSpec(model=model, max_revisions=asked.max_revisions, decision=asked.decision)


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
        self._model(message.settings)
        collections = await self._collections(live.owner, message.settings)
        live.store_now()  # a message that is not refused creates the conversation, before what it links
        attached = await self._attachments.prepare(live.owner, live.id, message.attachments)
        user = VisibleMessage(id=new_id("msg"), role="user", content=plan.visible, created_at=clock.now(),
                              attachments=attached.visible)
        content = _model_content(live, plan, attached.blocks)
        return await self._prepared(live, plan, message.settings, content, user, collections)

    async def prepare_again(self, live: LiveConversation, settings: MessageSettings) -> Prepared:
        """A turn that answers again the user message the active path ends at (regenerate):
        no new message, the history as it is."""
        self._model(settings)
        collections = await self._collections(live.owner, settings)
        return await self._prepared(live, Plan(request="", visible=""), settings, [], None, collections)

    def _model(self, settings: MessageSettings) -> str:
        model = self._settings.allowed(settings.model or self._settings.model)
        if model is None:
            raise FrameRejected("invalid_frame", f"Model {settings.model!r} is not available here; choose one of: "
                                                 + ", ".join(self._settings.models))
        return model

    async def _prepared(self, live: LiveConversation, plan: Plan, settings: MessageSettings,
                        content: list[dict[str, Any]], user: VisibleMessage | None,
                        collections: list[str]) -> Prepared:
        memories = await self._memories.load(live.owner)
        spec = TurnSpec(model=self._model(settings), thinking=settings.thinking and plan.tool_choice is None,  # the
                        tools=self._tool_names(settings, bool(collections)),  # API refuses thinking with a forced tool
                        # a message can add tools to the server's list, never take one off it
                        require_approval=sorted(self._settings.require_approval | set(settings.require_approval)),
                        tool_choice=plan.tool_choice, highlight=plan.highlight,
                        # The span edit needs only the excerpt: sending the history along with a
                        # forced tool_choice would process all of it again, uncached.
                        focused=plan.highlight is not None, window=plan.window, prefix=plan.prefix,
                        reflections=plan.reflections, review=review_spec(self._settings, settings.review),
                        knowledge=collections, client_tools=self._client_tools(settings), context=settings.context)
        turn = self._turn(live, spec, memories, focus=content if spec.focused else None)
        counter, system, tools = self._counter, turn.system, turn.tools
        live.manager.estimate_overhead(lambda: counter.text(json.dumps(system)) + counter.text(json.dumps(tools)))
        return Prepared(turn, user, content, spec.model_dump(mode="json"))

    async def resume(self, live: LiveConversation, spec: TurnSpec, *, first_call: bool,
                     thinking: bool = True) -> Turn:
        """The `Turn` of a stored turn that goes on after a failure, from its spec; the forced
        call (a highlight, a quick action) only if its first call never completed."""
        if not first_call:
            spec = spec.model_copy(update={"tool_choice": None, "focused": False})
        if not thinking:
            spec = spec.model_copy(update={"thinking": False})
        focus = None
        # Read before anything is awaited: the caller loaded the history, which may be let go
        # while the memories are read (sessions/continuation.py loads it again after).
        if spec.focused:  # the turn's own message, as the model read it
            focus = next((m["content"] for m in reversed(live.manager.messages) if m["role"] == "user"), None)
        memories = await self._memories.load(live.owner)
        return self._turn(live, spec, memories, focus=focus)

    def _turn(self, live: LiveConversation, spec: TurnSpec, memories: Any, *, focus: list[dict] | None) -> Turn:
        enabled = set(self._agent.registry.enabled())
        tools = self._agent.registry.schemas([name for name in spec.tools if name in enabled])
        system = system_blocks(SYSTEM_PROMPT, prefix=spec.prefix,
                               memories=render_memories(memories) if spec.reflections else None)
        if spec.context:
            system.append({"type": "text", "text": _context_text(spec.context)})
        client = ClientCalls([_client_schema(tool) for tool in spec.client_tools], self._settings.approval_timeout)
        knowledge = (KnowledgeScope(self._knowledge, live.owner, spec.knowledge)
                     if self._knowledge is not None else None)
        services = ToolServices(canvas=live.canvas, memory=self._memories.for_user(live.owner, memories),
                                highlight=spec.highlight, files=self._files.scoped(live.owner, live.id),
                                documents=self._documents, model=self._agent.model, knowledge=knowledge)
        return Turn(owner=live.owner, conversation_id=live.id, model=spec.model, system=system,
                    tools=[*tools, *client.schemas], client_calls=client,
                    thinking=spec.thinking, tool_choice=spec.tool_choice, window=spec.window, services=services,
                    focus=focus, approvals=ApprovalGate(frozenset(spec.require_approval),
                                                        self._settings.approval_timeout),
                    review=None if spec.review is None else ReviewPolicy(
                        spec.review.model, spec.review.max_revisions, spec.review.decision,
                        ReviewGate(self._settings.approval_timeout)))

    async def _collections(self, owner: str, settings: MessageSettings) -> list[str]:
        """The knowledge collections the message names, all of them the user's."""
        wanted = settings.knowledge
        if not wanted:
            return []
        if self._knowledge is None:
            raise FrameRejected("invalid_frame", "This server keeps no knowledge bases (its store is in memory).")
        try:
            return await self._knowledge.owned(owner, wanted)
        except KnowledgeError as exc:
            raise FrameRejected("not_found", f"settings.knowledge: {exc.message}") from None

    def _client_tools(self, settings: MessageSettings) -> list[ClientTool]:
        names = [tool.name for tool in settings.client_tools]
        clash = sorted(set(names) & set(self._agent.registry.enabled())) or sorted({n for n in names
                                                                                  if names.count(n) > 1})
        if clash:
            raise FrameRejected("invalid_frame", f"settings.clientTools: {', '.join(clash)} is named twice or "
                                                 "like a tool of the server's; name the client's tools apart.")
        return settings.client_tools

    def _tool_names(self, wanted: MessageSettings, knowledge: bool = False) -> list[str]:
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
