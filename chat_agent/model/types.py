"""The small interface every model client speaks, and the values that cross it.

Everything above the model package sees these types and the Messages API's own JSON shapes
(content blocks as dicts), never a provider SDK's objects.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Literal, Protocol, TypeVar, Union

from chat_agent.protocol import Usage


T = TypeVar("T")
# How request bodies are encoded (the SDKs' own settings): compact, UTF-8 as is.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def encode_json(value: Any) -> bytes:
    return _ENCODER.encode(value).encode()


class KeptMessage(dict[str, Any]):
    """A message a history keeps, sent again with every later call: what a request makes of
    it (its JSON, a provider's form of it) is made once (`made`), so that a request encodes
    only what is new, however long the history. Never changed in place (the history
    replaces a message, it does not edit one): a change would not reach what was made of it
    already, so every way to make one is refused. The tool registry keeps its tools'
    declarations as these too, since every call sends them again as well."""

    __slots__ = ("_made",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._made: dict[str, Any] = {}

    @classmethod
    def stored(cls, message: dict[str, Any], encoded: bytes) -> KeptMessage:
        """A message read back from the JSON it was stored as (compact, UTF-8 as is, as
        `encode_json` writes it): that JSON is its request JSON, so a conversation just
        opened does not encode its whole history again for its first call."""
        kept = cls(message)
        kept._made["json"] = encoded
        return kept

    def made(self, kind: str, make: Callable[[dict[str, Any]], T]) -> T:
        """`make(self)`, made the first time this `kind` is asked for."""
        made = self._made
        if kind not in made:
            made[kind] = make(self)
        return made[kind]

    def _refused(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a kept history message is never changed in place; the history replaces it")

    __setitem__ = __delitem__ = update = pop = popitem = setdefault = clear = __ior__ = _refused  # type: ignore

    def __reduce__(self) -> tuple[Any, ...]:
        return KeptMessage, (dict(self),)

    def __copy__(self) -> KeptMessage:
        return KeptMessage(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> KeptMessage:
        return KeptMessage(copy.deepcopy(dict(self), memo))


def once(message: dict[str, Any], kind: str, make: Callable[[dict[str, Any]], T]) -> T:
    """What `make` makes of a message: once for one the history keeps, else now."""
    return message.made(kind, make) if isinstance(message, KeptMessage) else make(message)


def made_of(messages: list[dict[str, Any]], kind: str, make: Callable[[dict[str, Any]], T]) -> list[T]:
    """`once` for each message, in one pass that calls nothing for what is made already (a
    request of 2,000 messages would spend a millisecond on the calls alone)."""
    return [m._made[kind] if type(m) is KeptMessage and kind in m._made else once(m, kind, make)  # type: ignore
            for m in messages]




@dataclass(slots=True)
class TextDelta:
    text: str


@dataclass(slots=True)
class ThinkingDelta:
    text: str


@dataclass(slots=True)
class CitationDelta:
    """The model cites one of the search results of its request (a `search_result` block of a
    tool result), for the text it streamed so far: `index` is that result's number, 1-based,
    over the distinct sources of the request in order (see `citing.search_sources`)."""

    index: int
    source: str
    cited_text: str


@dataclass(slots=True)
class ToolInputDelta:
    """A piece of a tool call's JSON input as the model writes it."""

    tool_id: str
    name: str
    piece: str


@dataclass(slots=True)
class ModelRequest:
    model: str
    messages: list[dict[str, Any]]
    max_tokens: int
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: dict[str, Any] | None = None
    thinking_budget: int | None = None
    # The JSON of `messages[:n]` as (n, pieces), each piece a run of messages joined by
    # commas: made by whoever keeps the history (ConversationManager.encoded), which extends
    # it from call to call, so that `body` walks only the messages after it instead of every
    # message of the history, and copies the history's bytes once, into the body.
    encoded: tuple[int, tuple[bytes, ...]] | None = None

    def params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"model": self.model, "messages": self.messages, "max_tokens": self.max_tokens}
        if self.system:
            params["system"] = self.system
        if self.tools:
            params["tools"] = self.tools
        if self.tool_choice:
            params["tool_choice"] = self.tool_choice
        if self.thinking_budget:
            params["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        return params

    def body(self, **extra: Any) -> bytes:
        """`params()` (and `extra`) as the JSON a Messages API request sends: the messages and
        tools are joined from their own JSON, which the kept ones (the history's messages, the
        registry's tools) made once."""
        params = {**self.params(), **extra}
        messages, tools = params.pop("messages"), params.pop("tools", None)
        parts = [encode_json(params)[:-1]]
        if tools:
            parts += (b',"tools":[', b",".join(made_of(tools, "json", encode_json)), b"]")
        start, pieces = (0, ()) if self.encoded is None else self.encoded
        if tail := made_of(messages[start:], "json", encode_json):
            pieces = (*pieces, b",".join(tail))
        parts.append(b',"messages":[')
        for n, piece in enumerate(pieces):
            if n:
                parts.append(b",")
            parts.append(piece)
        parts.append(b"]}")
        return b"".join(parts)


@dataclass(slots=True)
class ModelReply:
    """A finished model call: content blocks as API JSON, ready to go back into the history."""

    content: list[dict[str, Any]]
    stop_reason: str
    usage: Usage
    # tool_use id -> the JSON the model wrote for it, which is not valid JSON: the call is in
    # `content` with an empty input and must not run (its result tells the model why).
    invalid_calls: dict[str, str] = field(default_factory=dict)
    stop_detail: str | None = None  # the API's explanation of a refusal, when it gives one
    # What the provider could not do of what was asked (thinking, say), told to the user.
    notes: tuple[str, ...] = ()


@dataclass(slots=True)
class Retry:
    """The call failed before anything of it was yielded and is tried again after `delay`
    seconds: told so that the wait is not silence (PROTOCOL 1.2 "Live status")."""

    attempt: int  # the attempt about to start: 2 for the first retry
    attempts: int  # attempts at most
    reason: str  # why the last one failed, to follow "The model API ": "is overloaded (529)"
    delay: float


StreamItem = Union[TextDelta, ThinkingDelta, CitationDelta, ToolInputDelta, Retry, ModelReply]


class LLMError(Exception):
    """A model call that failed, said for the client. `retryable`: worth trying again as
    long as nothing of the call reached anyone; `reason` says why for a `Retry`, and
    `retry_after` is how long the API asked us to wait (its Retry-After), when it did."""

    def __init__(self, code: Literal["llm_error", "rate_limited"], message: str, *, retryable: bool = False,
                 reason: str | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable
        self.reason = reason or "failed"
        self.retry_after = retry_after


class ModelClient(Protocol):
    """What the loop, the summaries, titles, reflection and tools need of a model."""

    configured: bool  # False: no credentials for the main model, so its calls would fail

    def unavailable(self, model: str) -> str | None:
        """Why a call to `model` would fail before it is made (no key: which variable to
        set), or None. A name this client does not know is for the caller to refuse."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        """Deltas as they arrive, then one ModelReply. Raises LLMError. A `Retry` before
        another attempt, when a failed one is tried again."""
        ...

    async def call(self, request: ModelRequest) -> ModelReply: ...

    async def complete(self, request: ModelRequest) -> str:
        """A plain call; returns its text."""
        ...

    async def close(self) -> None: ...
