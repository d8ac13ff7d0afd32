"""The one module that talks to Anthropic: a streaming call, a plain call, and their errors."""

from __future__ import annotations

import inspect
import logging
from typing import Any, AsyncGenerator, AsyncIterator

import anthropic
import httpx2
from anthropic.types import Message

from chat_agent.config import Settings
from chat_agent.model.accumulate import ReplyAccumulator, reply_of
from chat_agent.model.fair import FairShare
from chat_agent.model.retry import INITIAL_BACKOFF, retry_after, RetryUnstarted, should_retry
from chat_agent.model.types import LLMError, ModelReply, ModelRequest, StreamItem
from chat_agent.tracing import ModelSpan, model_span

log = logging.getLogger(__name__)

# The SDK's pool, but idle connections are let go after 4 s instead of 5: servers that keep
# them 5 s (uvicorn, Node: most proxies in front of a model API) close theirs a little
# before the client's clock says so, and a request sent on one then fails with "Server
# disconnected" (measured against the fake: a few in a hundred reused at 4.9-5 s).
LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=4.0)
# The stream `messages.create(stream=True)` returns, for the same call made with the SDK's
# own `post` (see `_stream_once`), with each event left as the API's JSON: the SDK builds no
# model object per event (`_process_response_data` passes data through for `object`), and
# the accumulator reads the few fields a delta has (chat_agent/model/accumulate.py).
EVENTS = anthropic.AsyncStream[object]
STREAM_PATH = "/v1/messages"
# Errors the API reports that are worth another try of the same request.
_RETRYABLE_TYPES = {"overloaded_error", "api_error", "rate_limit_error"}


def _error_detail(exc: anthropic.APIStatusError) -> tuple[str, str]:
    body = exc.body if isinstance(exc.body, dict) else {}
    err = body.get("error") if isinstance(body.get("error"), dict) else body
    return str(err.get("type") or ""), str(err.get("message") or "")


def translate_error(exc: Exception) -> LLMError:
    """A readable error for the client: no stack trace, no request headers, no key. Whether
    it is worth another try is the SDK's rule for an HTTP answer; an error event inside a
    200 stream is, when its type says the API was overloaded or failed."""
    if isinstance(exc, anthropic.APIStatusError):
        return _status_error(exc)
    if isinstance(exc, anthropic.APITimeoutError):
        return LLMError("llm_error", "The model API timed out.", retryable=True, reason="timed out")
    if isinstance(exc, anthropic.APIConnectionError):
        # The operator needs the cause (refused, DNS, TLS, a full pool); the client does not.
        log.warning("could not reach the model API: %r", exc.__cause__ or exc)
        return LLMError("llm_error", "Could not reach the model API.", retryable=True, reason="could not be reached")
    if type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore"):
        # The SDK lets transport errors that happen mid-stream through unwrapped.
        return LLMError("llm_error", "The connection to the model API broke off.", retryable=True,
                        reason="broke off the connection")
    log.error("unexpected model call failure", exc_info=exc)
    return LLMError("llm_error", f"Model call failed: {type(exc).__name__}")


def _status_error(exc: anthropic.APIStatusError) -> LLMError:
    kind, detail = _error_detail(exc)
    status = exc.status_code
    if status == 200:  # an `error` event inside the stream
        retryable, asked = kind in _RETRYABLE_TYPES, None
    else:
        headers = exc.response.headers
        retryable, asked = should_retry(status, headers), retry_after(headers)
    where = "during the reply" if status == 200 else f"({status})"
    if kind == "rate_limit_error" or status == 429:
        return LLMError("rate_limited", "The model API is rate limiting us; try again in a moment.",
                        retryable=retryable, reason=f"is rate limiting us {where}", retry_after=asked)
    if kind == "overloaded_error" or status == 529:
        return LLMError("llm_error", "The model API is overloaded; try again in a moment.", retryable=retryable,
                        reason=f"is overloaded {where}", retry_after=asked)
    if status == 401 or kind == "authentication_error":
        return LLMError("llm_error", "The model API rejected our credentials (check ANTHROPIC_API_KEY).")
    message = f"The model API failed {where}" + (f": {kind}: {detail}" if detail else "")
    return LLMError("llm_error", message, retryable=retryable, reason=f"failed {where}", retry_after=asked)


def error_type(exc: Exception) -> str:
    """A failure's class for traces (`error.type`): the API's error type when it gave one
    (`overloaded_error`), else its status, else the exception's class."""
    if isinstance(exc, anthropic.APIStatusError):
        return _error_detail(exc)[0] or str(exc.status_code)
    return type(exc).__name__


def _no_sdk_spans() -> dict[str, Any]:
    """Turns off the spans SDKs that trace their own calls (`open_telemetry`) would add: a
    second span per model call would count its tokens twice in a trace backend, and ours
    follow the GenAI conventions where the SDK's do not (finish reasons, cache counts).
    Nor does a request carry our trace to the API."""
    if "open_telemetry" not in inspect.signature(anthropic.AsyncAnthropic.__init__).parameters:
        return {}  # an SDK that makes no spans
    return {"open_telemetry": {"traces": False, "propagation": False}}


class _Client(anthropic.AsyncAnthropic):
    """The SDK's client, but a streamed call's request is the first one's with another body.

    The SDK builds each request from its options anew: merging its default and platform
    headers, parsing the base URL and the path, copying: ~110 µs a call, where a request
    made of the first one's URL, headers and timeout takes ~13 µs. Every streamed call here
    posts the same path with the same headers and only its body differs (`_stream_once`),
    so only the first is built the SDK's way; any other call (the plain ones of background
    work, a retry, options of its own) still is. With 200 turns starting at once, the
    saving is a fifth of what the server does before their calls go out, and the upstream
    (on the same cores in the benchmarks) takes them in that much sooner."""

    _template: tuple[httpx2.URL, httpx2.Headers, dict[str, Any]] | None = None

    @property
    def user_agent(self) -> str:
        return f"AsyncAnthropic/Python {self._version}"  # the SDK names its class there, not this one

    def _build_request(self, options: Any, *, retries_taken: int = 0) -> httpx2.Request:
        if not self._reusable(options, retries_taken):
            return super()._build_request(options, retries_taken=retries_taken)
        if self._template is None:
            request = super()._build_request(options, retries_taken=retries_taken)
            headers = httpx2.Headers([(k, v) for k, v in request.headers.multi_items()
                                      if k.lower() != "content-length"])  # each body has its own
            self._template = (request.url, headers, dict(request.extensions))
            return request
        url, headers, extensions = self._template
        return httpx2.Request("POST", url, headers=headers, content=options.content, extensions=dict(extensions))

    def _reusable(self, options: Any, retries_taken: int) -> bool:
        """Whether the options are those of `_stream_once`'s post: nothing in them that would
        change the request but the body (an idempotency key would: this SDK sends none)."""
        return (retries_taken == 0 and self._idempotency_header is None and options.method == "post"
                and options.url == STREAM_PATH and type(options.content) is bytes and not options.params
                and not options.headers and options.files is None and options.json_data is None
                and options.extra_json is None and isinstance(options.timeout, anthropic.NotGiven)
                and options.follow_redirects is None)


def _failed(span: ModelSpan, exc: Exception) -> LLMError:
    error = translate_error(exc)
    span.failed(error_type(exc), error.message)
    return error


class AnthropicClient:
    """Streams model calls. Their retries are ours (`RetryUnstarted`), so that each shows; the
    plain calls of background work (summaries, titles) keep the SDK's."""

    def __init__(self, settings: Settings, *, backoff: float = INITIAL_BACKOFF):
        self._client = _Client(
            api_key=settings.anthropic_api_key or "missing-key",
            base_url=settings.anthropic_base_url,
            max_retries=settings.llm_max_retries,
            timeout=settings.llm_timeout,
            # aiohttp's C parser instead of httpx's pure-Python h11: a fourth less CPU per
            # model call, which every stream and every turn of a busy server pays.
            http_client=anthropic.DefaultAioHttpClient(limits=LIMITS),
            **_no_sdk_spans(),
        )
        self._streaming = self._client.with_options(max_retries=0)  # the same pool
        self.configured = bool(settings.anthropic_api_key)
        url = self._client.base_url
        self._server = (url.host, url.port)  # where calls go, for their spans
        self._retries = settings.llm_max_retries
        self._backoff = backoff

    async def close(self) -> None:
        await self._client.close()

    def unavailable(self, model: str) -> str | None:
        return None if self.configured else "The server has no ANTHROPIC_API_KEY, so it cannot reach the model."

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        """Yields deltas as they arrive, then one ModelReply. Raises LLMError."""
        return RetryUnstarted(lambda: self._stream_once(request), retries=self._retries, backoff=self._backoff)

    async def _stream_once(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        accumulator = ReplyAccumulator(request.messages)
        with model_span(request.model, request.max_tokens, stream=True, server=self._server) as span:
            try:
                # The raw events, so that one tool call with broken JSON does not end the stream
                # (the SDK's MessageStream raises there); the SDK still accumulates the message.
                # The body is ours, already JSON (`ModelRequest.body`: the history's messages
                # encoded once each), sent through the SDK's `post` as `messages.create` would
                # send it: `create` would copy and encode the whole history again on every call.
                async with await self._streaming.post(STREAM_PATH, cast_to=Message, stream=True,
                                                      content=request.body(stream=True),
                                                      stream_cls=EVENTS) as events:
                    fair = FairShare()
                    async for event in events:
                        span.first_chunk()
                        for item in accumulator.feed(event):
                            yield item
                        await fair.take_turns()
                reply = accumulator.reply()
            except Exception as exc:  # cancellation is a BaseException and passes through
                raise _failed(span, exc) from exc
            message = accumulator.message
            span.replied(reply.stop_reason, reply.usage, message.id, message.model)
        yield reply

    async def call(self, request: ModelRequest) -> ModelReply:
        """A plain (not streamed) call for background work: summaries, titles, reflection."""
        with model_span(request.model, request.max_tokens, stream=False, server=self._server) as span:
            try:
                message = await self._client.messages.create(**request.params())
            except Exception as exc:
                raise _failed(span, exc) from exc
            reply = reply_of(message)
            span.replied(reply.stop_reason, reply.usage, message.id, message.model)
        return reply

    async def complete(self, request: ModelRequest) -> str:
        """A plain call; returns its text."""
        reply = await self.call(request)
        return "".join(b["text"] for b in reply.content if b["type"] == "text").strip()
