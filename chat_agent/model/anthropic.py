"""The one module that talks to Anthropic: a streaming call, a plain call, and their errors."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any, AsyncIterator

import anthropic

from chat_agent.config import Settings
from chat_agent.model.types import (LLMError, ModelReply, ModelRequest, StreamItem, TextDelta, ThinkingDelta,
                                    ToolInputDelta)
from chat_agent.protocol import Usage
from chat_agent.text import scrub, scrub_json

log = logging.getLogger(__name__)

FAIR_SLICE = 0.005  # seconds one stream may run before letting other tasks in
# Errors the API reports that are worth another try of the same request.
_RETRYABLE_TYPES = {"overloaded_error", "api_error", "rate_limit_error"}


def _usage(usage: Any) -> Usage:
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_read_tokens=getattr(usage, "cache_read_input_tokens", None) or 0,
        cache_write_tokens=getattr(usage, "cache_creation_input_tokens", None) or 0,
    )


def _content(blocks: list[Any]) -> list[dict[str, Any]]:
    """A reply's content as history blocks, with any lone surrogate repaired (U+FFFD) the way
    its streamed deltas were: such text can be neither stored nor sent back."""
    return [scrub_json(b) for b in map(_block_json, blocks) if b is not None]


def _block_json(block: Any) -> dict[str, Any] | None:
    """The history form of a response block; text left empty is dropped (the API rejects it)."""
    kind = block.type
    if kind == "text":
        return {"type": "text", "text": block.text} if block.text else None
    if kind == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input or {}}
    if kind == "thinking":
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.data}
    return block.model_dump(mode="json", exclude_none=True)


def _error_detail(exc: anthropic.APIStatusError) -> tuple[str, str]:
    body = exc.body if isinstance(exc.body, dict) else {}
    err = body.get("error") if isinstance(body.get("error"), dict) else body
    return str(err.get("type") or ""), str(err.get("message") or "")


def translate_error(exc: Exception) -> LLMError:
    """A readable error for the client: no stack trace, no request headers, no key."""
    if isinstance(exc, anthropic.RateLimitError):
        return LLMError("rate_limited", "The model API is rate limiting us; try again in a moment.")
    if isinstance(exc, anthropic.APIStatusError):
        kind, detail = _error_detail(exc)
        status = exc.status_code
        # An `error` event inside a 200 stream: the SDK never retries these, so we may.
        midstream = status == 200 and kind in _RETRYABLE_TYPES
        if kind == "rate_limit_error":
            return LLMError("rate_limited", "The model API is rate limiting us; try again in a moment.",
                            retryable=midstream)
        if kind == "overloaded_error" or status == 529:
            return LLMError("llm_error", "The model API is overloaded; try again in a moment.", retryable=midstream)
        if status == 401 or kind == "authentication_error":
            return LLMError("llm_error", "The model API rejected our credentials (check ANTHROPIC_API_KEY).")
        where = "during the reply" if status == 200 else f"{status}"
        message = f"The model API failed ({where})" + (f": {kind}: {detail}" if detail else "")
        return LLMError("llm_error", message, retryable=midstream)
    if isinstance(exc, anthropic.APITimeoutError):
        return LLMError("llm_error", "The model API timed out.")
    if isinstance(exc, anthropic.APIConnectionError):
        return LLMError("llm_error", "Could not reach the model API.")
    if type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore"):
        # The SDK lets transport errors that happen mid-stream through unwrapped.
        return LLMError("llm_error", "The connection to the model API broke off.", retryable=True)
    log.error("unexpected model call failure", exc_info=exc)
    return LLMError("llm_error", f"Model call failed: {type(exc).__name__}")


class AnthropicClient:
    """Streams model calls. Retries what the SDK does not: an error that arrives inside a 200
    stream (the SDK only retries HTTP statuses), as long as nothing of that call was yielded."""

    def __init__(self, settings: Settings, *, midstream_retries: int = 2, backoff: float = 0.5):
        self._client = anthropic.AsyncAnthropic(
            api_key=settings.anthropic_api_key or "missing-key",
            base_url=settings.anthropic_base_url,
            max_retries=settings.llm_max_retries,
            timeout=settings.llm_timeout,
        )
        self.configured = bool(settings.anthropic_api_key)
        self._midstream_retries = midstream_retries
        self._backoff = backoff

    async def close(self) -> None:
        await self._client.close()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        """Yields deltas as they arrive, then one ModelReply. Raises LLMError."""
        attempt = 0
        while True:
            yielded = False
            try:
                async for item in self._stream_once(request):
                    yielded = True
                    yield item
                return
            except LLMError as exc:
                if yielded or not exc.retryable or attempt >= self._midstream_retries:
                    raise
            attempt += 1
            delay = self._backoff * (2 ** (attempt - 1)) * (0.75 + random.random() / 2)
            log.warning("model stream failed before any output; retry %d in %.2fs", attempt, delay)
            await asyncio.sleep(delay)

    async def _stream_once(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        loop = asyncio.get_running_loop()
        try:
            async with self._client.messages.stream(**request.params()) as stream:
                pause_at = loop.time() + FAIR_SLICE
                tool: tuple[str, str] = ("", "")  # the tool_use block being written: id, name
                async for event in stream:
                    kind = event.type
                    if kind == "text":
                        yield TextDelta(scrub(event.text))
                    elif kind == "thinking":
                        yield ThinkingDelta(scrub(event.thinking))
                    elif kind == "input_json":
                        if event.partial_json:
                            yield ToolInputDelta(tool[0], tool[1], scrub(event.partial_json))
                    elif kind == "content_block_start" and event.content_block.type == "tool_use":
                        tool = (event.content_block.id, event.content_block.name)
                    if loop.time() >= pause_at:
                        # With data already buffered the SDK never awaits anything real, so a
                        # fast stream would hold the event loop (and every other client,
                        # and abort) for as long as it lasts.
                        await asyncio.sleep(0)
                        pause_at = loop.time() + FAIR_SLICE
                message = await stream.get_final_message()
        except Exception as exc:  # cancellation is a BaseException and passes through
            raise translate_error(exc) from exc
        content = _content(message.content)
        yield ModelReply(content, message.stop_reason or "end_turn", _usage(message.usage))

    async def call(self, request: ModelRequest) -> ModelReply:
        """A plain (not streamed) call for background work: summaries, titles, reflection."""
        try:
            message = await self._client.messages.create(**request.params())
        except Exception as exc:
            raise translate_error(exc) from exc
        content = _content(message.content)
        return ModelReply(content, message.stop_reason or "end_turn", _usage(message.usage))

    async def complete(self, request: ModelRequest) -> str:
        """A plain call; returns its text."""
        reply = await self.call(request)
        return "".join(b["text"] for b in reply.content if b["type"] == "text").strip()
