"""The spans chat-agent makes, named and attributed as the OpenTelemetry GenAI semantic
conventions say (github.com/open-telemetry/semantic-conventions-genai): a turn
(`invoke_agent`), each model call (`chat`, Anthropic's refinement), each tool call
(`execute_tool`), and the background jobs (title, reflection) that call the model outside
a turn.

Only the OpenTelemetry API is used here. Without an SDK installed every span is the API's
non-recording no-op. What is recorded is what happened, never what was said: message
contents, tool inputs and outputs, prompts and error texts that could quote them stay out
(they are user data).

A span never delays cancellation: starting and ending one is a few synchronous calls, and
an aborted turn's span is ended, marked "aborted", as the cancellation passes through.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from contextlib import contextmanager
from typing import Iterator

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, StatusCode

from chat_agent.protocol import Usage

TRACER = "chat_agent"
AGENT = "chat-agent"  # gen_ai.agent.name
PROVIDER = "anthropic"
# error.type of something cancelled (an abort, or the consumer leaving a stream)
CANCELLED = "cancelled"
ABORTED = "aborted"

OPERATION = "gen_ai.operation.name"
PROVIDER_NAME = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"  # the name before gen_ai.provider.name: some backends still read only this one
CONVERSATION_ID = "gen_ai.conversation.id"
ERROR_TYPE = "error.type"


@functools.cache
def _tracer() -> trace.Tracer:
    # Made at the first span, not at import (the API may read the environment then). Before
    # a provider is installed it is the API's proxy, which hands over to the provider once
    # there is one; the lookup itself costs more than a no-op span, hence kept.
    return trace.get_tracer(TRACER)


def _error(span: Span, error_type: str, description: str | None = None) -> None:
    span.set_attribute(ERROR_TYPE, error_type)
    span.set_status(StatusCode.ERROR, description or error_type)


def _ended_by(exc: BaseException) -> str:
    if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
        return CANCELLED
    return type(exc).__qualname__


def user_hash(owner: str) -> str:
    """An owner's name is whatever the operator chose (an email, say): traces get a digest,
    which groups a user's turns without naming them."""
    return hashlib.sha256(owner.encode()).hexdigest()[:32]


# ---- the turn ---------------------------------------------------------------------------------


class TurnSpan:
    __slots__ = ("span", "_failure")

    def __init__(self, span: Span) -> None:
        self.span = span
        self._failure: str | None = None

    def failed(self, error_type: str) -> None:
        """The turn reported an error (a model call failed, say); `stopped` marks the span."""
        self._failure = error_type

    def stopped(self, stop_reason: str) -> None:
        self.span.set_attribute("chat_agent.turn.stop_reason", stop_reason)
        if stop_reason == ABORTED:
            _error(self.span, ABORTED)
        elif stop_reason == "error":
            _error(self.span, self._failure or "error")


@contextmanager
def turn_span(conversation_id: str, turn_id: str | None, owner: str, *,
              parent: Context | None = None) -> Iterator[TurnSpan]:
    """The span of one turn, current while the block runs (the turn's model and tool calls
    are its children). `parent`: a context from `extract()` (a command forwarded by another
    instance); by default the current context's span, if any, is the parent."""
    attributes = {OPERATION: "invoke_agent", "gen_ai.agent.name": AGENT, PROVIDER_NAME: PROVIDER,
                  CONVERSATION_ID: conversation_id, "user.hash": user_hash(owner)}
    if turn_id is not None:
        attributes["chat_agent.turn.id"] = turn_id
    span = _tracer().start_span(f"invoke_agent {AGENT}", context=parent, kind=SpanKind.INTERNAL,
                                attributes=attributes)
    token = otel_context.attach(trace.set_span_in_context(span, parent))
    turn = TurnSpan(span)
    try:
        yield turn
    except BaseException as exc:
        turn.failed(_ended_by(exc))
        turn.stopped(ABORTED if isinstance(exc, asyncio.CancelledError) else "error")
        raise
    finally:
        otel_context.detach(token)
        span.end()


# ---- a model call -------------------------------------------------------------------------------


class ModelSpan:
    __slots__ = ("span", "_started", "_first", "_done")

    def __init__(self, span: Span) -> None:
        self.span = span
        self._started = time.monotonic()
        self._first = False
        self._done = False

    def first_chunk(self) -> None:
        """The first event of a streamed reply arrived (gen_ai.response.time_to_first_chunk)."""
        if not self._first:
            self._first = True
            self.span.set_attribute("gen_ai.response.time_to_first_chunk", time.monotonic() - self._started)

    def replied(self, stop_reason: str, usage: Usage, response_id: str | None, response_model: str | None) -> None:
        self._done = True
        span = self.span
        if not span.is_recording():
            return
        # Anthropic's input_tokens leaves out the cached ones; the convention's counts them all.
        attributes = {"gen_ai.response.finish_reasons": (stop_reason,),
                      "gen_ai.usage.input_tokens": usage.prompt_tokens,
                      "gen_ai.usage.output_tokens": usage.output_tokens,
                      "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
                      "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens}
        if response_id:
            attributes["gen_ai.response.id"] = response_id
        if response_model:
            attributes["gen_ai.response.model"] = response_model
        span.set_attributes(attributes)

    def failed(self, error_type: str, description: str) -> None:
        """`description` is the message the client is shown: no request content."""
        self._done = True
        _error(self.span, error_type, description)


@contextmanager
def model_span(model: str, max_tokens: int, *, stream: bool, server: tuple[str, int | None] | None = None,
               provider: str = PROVIDER) -> Iterator[ModelSpan]:
    """The span of one model call (one HTTP request), a child of the current span. It is not
    made current: nothing runs under it, and the streaming call it wraps is a generator,
    whose steps run in whatever context its consumer has."""
    attributes: dict[str, str | int | bool] = {OPERATION: "chat", PROVIDER_NAME: provider, SYSTEM: provider,
                                               "gen_ai.request.model": model, "gen_ai.request.max_tokens": max_tokens}
    if stream:
        attributes["gen_ai.request.stream"] = True
    if server is not None:
        attributes["server.address"] = server[0]
        if server[1] is not None:
            attributes["server.port"] = server[1]
    span = _tracer().start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes)
    call = ModelSpan(span)
    try:
        yield call
    except BaseException as exc:
        if not call._done:
            _error(span, _ended_by(exc))
        raise
    finally:
        span.end()


# ---- a tool call ------------------------------------------------------------------------------


class ToolSpan:
    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def ended(self, is_error: bool, error_type: str | None = None) -> None:
        if is_error:
            _error(self.span, error_type or "tool_error")


@contextmanager
def tool_span(name: str, tool_id: str) -> Iterator[ToolSpan]:
    """The span of one tool call, current while the tool runs (a tool that asks a model
    itself, deep research say, makes its calls children of this one)."""
    span = _tracer().start_span(f"execute_tool {name}", kind=SpanKind.INTERNAL, attributes={
        OPERATION: "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": tool_id,
        "gen_ai.tool.type": "function"})
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        yield ToolSpan(span)
    except BaseException as exc:
        _error(span, _ended_by(exc))
        raise
    finally:
        otel_context.detach(token)
        span.end()


# ---- a command sent to another instance ------------------------------------------------------------


@contextmanager
def forward_span(command: str, conversation_id: str) -> Iterator[None]:
    """The span of a client's command that this instance sends on to the conversation's
    owner, current while it is sent: `inject()` inside it gives the carrier, and the owner's
    turn (started under `extract(carrier)`) becomes its child, in one trace."""
    span = _tracer().start_span(f"forward {command}", kind=SpanKind.PRODUCER,
                                attributes={"chat_agent.command": command, CONVERSATION_ID: conversation_id})
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        yield
    except BaseException as exc:
        _error(span, _ended_by(exc))
        raise
    finally:
        otel_context.detach(token)
        span.end()


# ---- background work ----------------------------------------------------------------------------


@contextmanager
def job_span(job: str, conversation_id: str) -> Iterator[None]:
    """The span of a background job of a conversation (its title, a reflection): the parent
    of the model call it makes, which would otherwise stand alone."""
    span = _tracer().start_span(f"chat_agent {job}", kind=SpanKind.INTERNAL,
                                attributes={"chat_agent.job": job, CONVERSATION_ID: conversation_id})
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        yield
    except BaseException as exc:
        _error(span, _ended_by(exc))
        raise
    finally:
        otel_context.detach(token)
        span.end()
