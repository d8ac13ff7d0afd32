"""The one module that talks to OpenAI-compatible APIs (OpenAI, Ollama, vLLM, OpenRouter,
LiteLLM): Chat Completions streamed, a plain call, and their errors.

The request is translated from the Messages API's shapes (`openai_messages`) and the reply
back into them (`openai_stream`), so nothing above the model package can tell which API
answered. What the provider cannot do is said in the reply's `notes` (thinking).
"""

from __future__ import annotations

import logging
from typing import Any, AsyncGenerator, AsyncIterator

import openai
from openai.types.chat import ChatCompletion

from chat_agent.config import Settings
from chat_agent.model.citing import MarkerScanner
from chat_agent.model.fair import FairShare
from chat_agent.model.openai_messages import chat_body, chat_params, max_tokens
from chat_agent.model.openai_stream import ChunkAccumulator, reply_of_completion
from chat_agent.model.retry import INITIAL_BACKOFF, retry_after, RetryUnstarted, should_retry
from chat_agent.model.types import LLMError, ModelReply, ModelRequest, StreamItem, TextDelta
from chat_agent.tracing import ModelSpan, model_span

log = logging.getLogger(__name__)

PROVIDER = "openai"
THINKING_OFF = "Thinking is not available on {model} (an OpenAI-compatible model); it answered without it."
NO_KEY = "The server has no OPENAI_API_KEY, so it cannot reach {model}."
# OpenAI's own API wants max_completion_tokens (its reasoning models refuse max_tokens);
# the compatible servers (Ollama, vLLM, ...) know max_tokens.
OPENAI_HOSTS = ("api.openai.com",)
# The stream `chat.completions.create(stream=True)` returns, for the same call made with the
# SDK's own `post` (see `_stream_once`); its options as `create` sets them (the API key).
CHUNKS = openai.AsyncStream[object]  # each chunk left as the API's JSON (see openai_stream.py)
STREAM_OPTIONS: Any = {"security": {"bearer_auth": True}}


class _Unfinished(Exception):
    """The stream ended (the server closed it) before its reply said why it stopped."""


def _error_detail(exc: openai.APIError) -> tuple[str, str]:
    """The error's code or type, and its message, from the body the API sent."""
    body = exc.body if isinstance(exc.body, dict) else {}
    err = body.get("error") if isinstance(body.get("error"), dict) else body
    kind = err.get("code") or err.get("type") or ""
    return str(kind), str(err.get("message") or "")


def translate_error(exc: Exception, *, midstream: bool = False) -> LLMError:
    """A readable error for the client: no stack trace, no request headers, no key (OpenAI's
    401 quotes part of the key, so its message is not passed on). Worth another try: what
    the SDK retries (by its rule for HTTP answers), and a stream that broke off."""
    if isinstance(exc, openai.APIStatusError):
        return _status_error(exc)
    if isinstance(exc, openai.APITimeoutError):
        return LLMError("llm_error", "The model API timed out.", retryable=True, reason="timed out")
    if isinstance(exc, openai.APIConnectionError):
        if midstream:
            return LLMError("llm_error", "The connection to the model API broke off.", retryable=True,
                            reason="broke off the connection")
        return LLMError("llm_error", "Could not reach the model API.", retryable=True, reason="could not be reached")
    if isinstance(exc, openai.APIError):  # an error sent inside a 200 stream
        kind, detail = _error_detail(exc)
        detail = detail or exc.message
        return LLMError("llm_error", "The model API failed during the reply" + (f": {detail}" if detail else ""),
                        retryable=True, reason="failed during the reply")
    if isinstance(exc, _Unfinished):
        return LLMError("llm_error", "The model API's reply ended before it finished.", retryable=True,
                        reason="ended its reply early")
    if type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore"):
        return LLMError("llm_error", "The connection to the model API broke off.", retryable=True,
                        reason="broke off the connection")
    log.error("unexpected model call failure", exc_info=exc)
    return LLMError("llm_error", f"Model call failed: {type(exc).__name__}")


def _status_error(exc: openai.APIStatusError) -> LLMError:
    kind, detail = _error_detail(exc)
    status, headers = exc.status_code, exc.response.headers
    retry = {"retryable": should_retry(status, headers), "retry_after": retry_after(headers)}
    if kind == "insufficient_quota":  # a 429 that no wait cures
        return LLMError("llm_error", "The model API says the account has no quota left (insufficient_quota).")
    if status == 429:
        return LLMError("rate_limited", "The model API is rate limiting us; try again in a moment.",
                        reason="is rate limiting us (429)", **retry)
    if status in (401, 403):
        return LLMError("llm_error", "The model API rejected our credentials (check OPENAI_API_KEY).")
    return LLMError("llm_error", f"The model API failed ({status})" + (f": {detail}" if detail else ""),
                    reason=f"failed ({status})", **retry)


def error_type(exc: Exception) -> str:
    if isinstance(exc, openai.APIStatusError):
        return _error_detail(exc)[0] or str(exc.status_code)
    return type(exc).__name__


def _failed(span: ModelSpan, exc: Exception, midstream: bool = False) -> LLMError:
    error = translate_error(exc, midstream=midstream)
    span.failed(error_type(exc), error.message)
    return error


class OpenAIClient:
    """Streams Chat Completions. Like the Anthropic client, it retries streamed calls itself
    (`RetryUnstarted`), so that each try shows, as long as nothing of the call was yielded;
    plain calls keep the SDK's retries."""

    def __init__(self, settings: Settings, *, backoff: float = INITIAL_BACKOFF):
        self._client = openai.AsyncOpenAI(
            api_key=settings.openai_api_key or "missing-key",
            base_url=settings.openai_base_url,
            max_retries=settings.llm_max_retries,
            timeout=settings.llm_timeout,
        )
        self._streaming = self._client.with_options(max_retries=0)  # the same pool
        self.configured = bool(settings.openai_api_key)
        url = self._client.base_url
        self._server = (url.host, url.port)  # where calls go, for their spans
        self._max_tokens = "max_completion_tokens" if url.host in OPENAI_HOSTS else "max_tokens"
        self._retries = settings.llm_max_retries
        self._backoff = backoff

    def unavailable(self, model: str) -> str | None:
        return None if self.configured else NO_KEY.format(model=model)

    async def close(self) -> None:
        await self._client.close()

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        """Yields deltas as they arrive, then one ModelReply. Raises LLMError."""
        return RetryUnstarted(lambda: self._stream_once(request), retries=self._retries, backoff=self._backoff)

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        return chat_params(request, max_tokens_field=self._max_tokens)

    async def _stream_once(self, request: ModelRequest) -> AsyncGenerator[StreamItem, None]:
        chunks = ChunkAccumulator()
        markers = MarkerScanner(request.messages)  # the model's `[n]`: citations of search results
        # The body is ours, already JSON (`chat_body`: the history's messages translated and
        # encoded once each), sent through the SDK's `post` as `chat.completions.create` would
        # send it: `create` would walk, copy and encode the whole history again on every call.
        body = chat_body(request, max_tokens_field=self._max_tokens, stream=True,
                         stream_options={"include_usage": True})
        with model_span(request.model, max_tokens(request), stream=True, server=self._server,
                        provider=PROVIDER) as span:
            started = False
            try:
                stream = await self._streaming.post("/chat/completions", cast_to=ChatCompletion, content=body,
                                                    options=STREAM_OPTIONS, stream=True, stream_cls=CHUNKS)
                started = True
                async with stream:  # closing it (abort) closes the HTTP response
                    fair = FairShare()
                    async for chunk in stream:
                        span.first_chunk()
                        for item in chunks.feed(chunk):
                            if isinstance(item, TextDelta):  # cut after each `[n]`, its citation there
                                for piece in markers.split(item.text):
                                    yield piece
                            else:
                                yield item
                        await fair.take_turns()
                if chunks.finish is None:
                    raise _Unfinished()
                reply = self._noted(request, chunks.reply(), thought=chunks.thought)
            except Exception as exc:  # cancellation is a BaseException and passes through
                raise _failed(span, exc, midstream=started) from exc
            span.replied(reply.stop_reason, reply.usage, chunks.id, chunks.model)
        yield reply

    @staticmethod
    def _noted(request: ModelRequest, reply: ModelReply, *, thought: bool) -> ModelReply:
        if request.thinking_budget and not thought:
            reply.notes = (*reply.notes, THINKING_OFF.format(model=request.model))
        return reply

    async def call(self, request: ModelRequest) -> ModelReply:
        """A plain (not streamed) call for background work: summaries, titles, reflection."""
        params = self._params(request)
        with model_span(request.model, params[self._max_tokens], stream=False, server=self._server,
                        provider=PROVIDER) as span:
            try:
                completion = await self._client.chat.completions.create(**params)
                reply = self._noted(request, reply_of_completion(completion), thought=False)
            except Exception as exc:
                raise _failed(span, exc) from exc
            span.replied(reply.stop_reason, reply.usage, completion.id, completion.model)
        return reply

    async def complete(self, request: ModelRequest) -> str:
        """A plain call; returns its text."""
        reply = await self.call(request)
        return "".join(b["text"] for b in reply.content if b["type"] == "text").strip()
