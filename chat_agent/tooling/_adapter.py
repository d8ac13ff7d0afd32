"""How one LangChain tool is called: the model's input in, (content, artifact, is_error) out."""

from __future__ import annotations

import inspect
import typing
from typing import Any, Callable, Literal

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, InjectedToolArg, InjectedToolCallId, StructuredTool
from pydantic import BaseModel

from chat_agent.tooling._threads import in_thread
from chat_agent.tooling._types import ToolContext

Kind = Literal["ctx", "call_id", "other"]
NO_ARTIFACT: Any = object()  # the tool has no separate value for the UI
Outcome = tuple[Any, Any, bool]  # (content, artifact or NO_ARTIFACT, is_error)

# Parameters through which LangChain hands a tool its callback machinery; a tool
# that asks for them gets the full `ainvoke` path.
_CALLBACK_PARAMS = frozenset({"callbacks", "run_manager"})


class Adapter:
    """Calls one tool. Everything about the tool that can be worked out once is,
    here, so that a call is a validation plus an await.

    Fast path: a `StructuredTool` with a coroutine (every `@tool async def`) is
    validated with its args schema and its coroutine awaited directly, as
    `BaseTool._parse_input` and `StructuredTool._arun` would do, minus the callback
    managers (~100 µs). Any other `BaseTool` (sync tools, subclasses, tools wanting
    callbacks or a RunnableConfig) goes through `ainvoke` with a ToolCall, so it
    runs exactly as under LangChain, including `handle_tool_error`; a sync one
    (no coroutine, no `_arun` of its own) by `invoke` in a thread of its own.
    """

    __slots__ = ("tool", "name", "timeout", "_model", "_fields", "_in_schema", "_outside", "_coroutine", "_artifact",
                 "_sync")

    def __init__(self, tool: BaseTool, timeout: float | None) -> None:
        self.tool = tool
        self.name = tool.name
        self.timeout = timeout
        schema = tool.args_schema
        self._model = schema if isinstance(schema, type) and issubclass(schema, BaseModel) else None
        fields = self._model.model_fields if self._model is not None else {}
        injected = _injected_params(tool, fields)
        self._in_schema = tuple((k, kind) for k, kind in injected.items() if k in fields)
        self._outside = tuple((k, kind) for k, kind in injected.items() if k not in fields)
        self._fields = tuple((k, not f.is_required() and k not in ("args", "kwargs")) for k, f in fields.items())
        self._coroutine = _fast_coroutine(tool) if self._model is not None else None
        self._artifact = tool.response_format == "content_and_artifact"
        self._sync = _is_sync(tool)

    def bind(self, tool_input: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        """The arguments for the call; raises pydantic's ValidationError on bad input."""
        data = dict(tool_input)  # never mutate the model's input: it is history
        for key, kind in self._in_schema:
            data[key] = ctx if kind == "ctx" else ctx.tool_id
        if self._model is not None:
            model = self._model.model_validate(data)
            if self._coroutine is not None:
                # LangChain's rule: fields given (by name or alias) plus those with defaults.
                given = model.model_fields_set
                data = {k: getattr(model, k) for k, has_default in self._fields if has_default or k in given}
        for key, kind in self._outside:
            data[key] = ctx if kind == "ctx" else ctx.tool_id
        return data

    async def invoke(self, args: dict[str, Any], ctx: ToolContext) -> Outcome:
        if self._coroutine is not None:
            value = await self._coroutine(**args)
            if not self._artifact:
                return value, NO_ARTIFACT, False
            content, artifact = _split(value)
            return content, artifact, False
        call = {"type": "tool_call", "id": ctx.tool_id, "name": self.name, "args": args}
        message = await (in_thread(self.name, self.tool.invoke, call) if self._sync else self.tool.ainvoke(call))
        if not isinstance(message, ToolMessage):  # e.g. a LangGraph Command
            return message, NO_ARTIFACT, False
        artifact = message.artifact if self._artifact else NO_ARTIFACT
        return message.content, artifact, message.status == "error"


def _split(value: Any) -> tuple[Any, Any]:
    if isinstance(value, tuple) and len(value) == 2:
        return value
    raise ValueError(
        "response_format='content_and_artifact' expects a (content, artifact) tuple, "
        f"got {type(value).__name__}"
    )


def _is_sync(tool: BaseTool) -> bool:
    """Whether LangChain would run the tool's `_run` in the loop's default executor."""
    if isinstance(tool, StructuredTool):
        return tool.coroutine is None and type(tool)._arun is StructuredTool._arun
    return type(tool)._arun is BaseTool._arun


def _fast_coroutine(tool: BaseTool) -> Callable[..., Any] | None:
    if not isinstance(tool, StructuredTool) or tool.coroutine is None:
        return None
    if type(tool)._arun is not StructuredTool._arun or tool.callbacks or tool.verbose:
        return None
    params = inspect.signature(tool.coroutine).parameters
    if _CALLBACK_PARAMS & params.keys():
        return None
    if any(hint is RunnableConfig for hint in _hints(tool.coroutine).values()):
        return None
    return tool.coroutine


def _injected_params(tool: BaseTool, fields: dict[str, Any]) -> dict[str, Kind]:
    """Parameters the model must not see, from the args schema and the function signature."""
    found: dict[str, Kind] = {}
    for name, info in fields.items():
        if kind := _kind(info.annotation, info.metadata):
            found[name] = kind
    for fn in _callables(tool):
        for name, hint in _hints(fn).items():
            if typing.get_origin(hint) is typing.Annotated and name not in found:
                base, *meta = typing.get_args(hint)
                if kind := _kind(base, meta):
                    found[name] = kind
    other = [name for name, kind in found.items() if kind == "other"]
    if other:
        raise ValueError(
            f"tool {tool.name!r}: injected argument(s) {', '.join(other)} cannot be supplied; "
            "the registry injects only Annotated[ToolContext, InjectedToolArg] and InjectedToolCallId"
        )
    return found


def _kind(base: Any, metadata: list[Any]) -> Kind | None:
    markers = [m if isinstance(m, type) else type(m) for m in metadata]
    markers = [m for m in markers if issubclass(m, InjectedToolArg)]
    if not markers:
        return None
    if any(issubclass(m, InjectedToolCallId) for m in markers):
        return "call_id"
    if isinstance(base, type) and issubclass(base, ToolContext):
        return "ctx"
    return "other"


def _callables(tool: BaseTool) -> list[Callable[..., Any]]:
    if isinstance(tool, StructuredTool):
        return [fn for fn in (tool.func, tool.coroutine) if fn is not None]
    own = [tool._run, tool._arun]
    return [fn for fn in own if getattr(fn, "__func__", None) not in (BaseTool._run, BaseTool._arun)]


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:  # an unresolvable forward reference: nothing to learn here
        return {}
