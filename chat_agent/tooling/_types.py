"""The small public vocabulary shared by the registry and the tools."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic_core import core_schema

from chat_agent.canvas.artifact import Canvas
from chat_agent.canvas.memory import UserMemory
from chat_agent.files.attachments import DocumentLibrary
from chat_agent.files.catalog import ConversationFiles
from chat_agent.knowledge.scope import KnowledgeScope
from chat_agent.model import ModelClient
from chat_agent.protocol import Highlight


@dataclass(slots=True, frozen=True)
class ToolServices:
    """What a turn lends its tools. A field is None where the caller has none to give (a tool
    run outside any conversation, a turn without a highlight)."""

    canvas: Canvas | None = None  # the conversation's artifact
    memory: UserMemory | None = None  # the user's reflections
    highlight: Highlight | None = None  # the span the user selected, for a span edit
    files: ConversationFiles | None = None  # this conversation's files (images, documents)
    model: ModelClient | None = None  # for tools that ask a model themselves
    documents: DocumentLibrary | None = None  # parsed documents, read on demand
    knowledge: KnowledgeScope | None = None  # the user's knowledge, its collections this turn may search


@dataclass(slots=True)
class ToolContext:
    """What a tool may know about the call it serves.

    A tool asks for it with a parameter annotated
    `Annotated[ToolContext, InjectedToolArg]`; the registry fills it in and the
    model never sees it. Built by hand (tests, scripts) it works too: `progress`
    is then a no-op.
    """

    conversation_id: str
    owner: str
    tool_id: str
    _report: Callable[[str], None] | None = field(default=None, repr=False, compare=False)
    services: ToolServices = field(default_factory=ToolServices)

    # Typed access to the services; each raises where this call has none to lend.
    @property
    def canvas(self) -> Canvas:
        return self.require("canvas")

    @property
    def memory(self) -> UserMemory:
        return self.require("memory")

    @property
    def files(self) -> ConversationFiles:
        return self.require("files")

    @property
    def model(self) -> ModelClient:
        return self.require("model")

    @property
    def documents(self) -> DocumentLibrary:
        return self.require("documents")

    @property
    def knowledge(self) -> KnowledgeScope:
        return self.require("knowledge")

    @property
    def highlight(self) -> Highlight | None:
        return self.services.highlight

    def require(self, service: str) -> Any:
        """A service by name; RuntimeError where this call has none (AttributeError for a
        name that is not a service at all)."""
        value = getattr(self.services, service)
        if value is None:
            raise RuntimeError(f"{service} is not available to this tool call")
        return value

    def progress(self, status: str) -> None:
        """Tell the user what the tool is doing now (a short phrase): a `tool_progress` frame.

        Safe to call from a worker thread (a sync tool): the report is handed to
        the event loop.
        """
        if self._report is not None:
            self._report(status)

    # LangChain validates every argument, injected ones included, with the tool's
    # pydantic args schema. An isinstance check keeps that to ~0.1 µs and hands the
    # tool this very object (pydantic would otherwise rebuild the dataclass).
    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.is_instance_schema(cls)

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> dict[str, Any]:
        # Only reached by tracing code dumping the full args schema; the model's
        # schema never contains the context.
        return {"type": "object", "description": "injected by the registry"}


@dataclass(slots=True, frozen=True)
class ToolAvailability:
    """One line of `session.tools`: whether a tool is offered, and if not why."""

    name: str
    enabled: bool
    reason: str | None = None


@dataclass(slots=True)
class ToolResult:
    """The outcome of one tool call, ready for the model and for the UI."""

    content: str | list[dict]  # the tool_result content the model gets back
    output: Any  # JSON-able value for the UI (tool_end.output)
    is_error: bool
    # Why it failed, in a word for traces (`timeout`, `invalid_input`, an exception's class);
    # never the message, which may quote the input.
    error_type: str | None = field(default=None, compare=False)


class ToolUnavailable(Exception):
    """raised by a tool module's build() when its service is not configured; str(exc) is the reason shown to users"""
