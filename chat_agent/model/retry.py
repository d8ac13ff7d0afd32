"""Another try of a streamed call that failed before anything of it reached the caller.

Our own loop, not the SDKs' (their retries are off for streamed calls), so that every try
is told: a `Retry` item before it, which the user sees as a `status` frame instead of
silence. What is tried again is what the SDKs retry (408, 409, 429, 5xx and 529 answers, a
connection refused or timed out) and what they never do, an error inside a 200 stream (a
mid-stream `overloaded_error`, a connection that broke off); either only while nothing of
the call was yielded. The wait is the SDKs': what the API asks for (Retry-After), else
exponential backoff with jitter.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from typing import AsyncGenerator, Awaitable, Callable, Mapping

from chat_agent.model.types import LLMError, Retry, StreamItem

log = logging.getLogger(__name__)

INITIAL_BACKOFF, MAX_BACKOFF = 0.5, 8.0  # seconds: the SDKs' exponential backoff
# A Retry-After longer than this is not waited for: the call fails (`rate_limited` says to
# try again later) instead of holding the turn for minutes.
MAX_RETRY_AFTER = 60.0


def should_retry(status: int, headers: Mapping[str, str]) -> bool:
    """Whether an HTTP error answer is worth another try, by the SDKs' rule: the API's
    `x-should-retry` when it says, else request timeouts, lock timeouts, rate limits and
    server errors."""
    says = headers.get("x-should-retry")
    if says in ("true", "false"):
        return says == "true"
    return status in (408, 409, 429) or status >= 500


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the API asks us to wait (`retry-after-ms`, `retry-after` in seconds or as a
    date), None when it does not say."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return float(headers.get(name) or "") * scale
        except ValueError:
            pass
    when = email.utils.parsedate_tz(headers.get("retry-after") or "")
    return None if when is None else email.utils.mktime_tz(when) - time.time()


def delay_before(retries_done: int, backoff: float, asked: float | None) -> float | None:
    """How long to wait before the next try; None when the API asks for longer than we wait."""
    if asked is not None and asked > 0:
        return asked if asked <= MAX_RETRY_AFTER else None
    return min(backoff * 2 ** retries_done, MAX_BACKOFF) * (1 - 0.25 * random.random())


class RetryUnstarted:
    """Yields what `attempt_stream()` yields; when it raises a retryable LLMError before it
    yielded anything, yields a `Retry`, waits and starts it again (at most `retries` times).

    Once an attempt has yielded, it is never tried again: from then on its items are handed
    on as they come, with no step of this iterator between (a stream's every event passes
    here; a generator around it cost one more resumption each)."""

    def __init__(self, attempt_stream: Callable[[], AsyncGenerator[StreamItem, None]], *, retries: int,
                 backoff: float) -> None:
        self._attempt_stream = attempt_stream
        self._retries = retries
        self._backoff = backoff
        self._attempt = 1
        self._delay: float | None = None  # the wait before the next attempt, once its Retry went out
        self._items: AsyncGenerator[StreamItem, None] | None = None  # the attempt that yielded

    def __aiter__(self) -> RetryUnstarted:
        return self

    def __anext__(self) -> Awaitable[StreamItem]:
        if self._items is not None:
            return self._items.__anext__()
        return self._start()

    async def _start(self) -> StreamItem:
        if self._delay is not None:
            delay, self._delay = self._delay, None
            await asyncio.sleep(delay)
        items = self._attempt_stream()
        try:
            item = await items.__anext__()
        except LLMError as exc:
            await items.aclose()
            retryable = exc.retryable and self._attempt <= self._retries
            delay = delay_before(self._attempt - 1, self._backoff, exc.retry_after) if retryable else None
            if delay is None:
                raise
            self._attempt += 1
            log.warning("model call failed before any output (the API %s); attempt %d of %d in %.2fs",
                        exc.reason, self._attempt, self._retries + 1, delay)
            self._delay = delay
            return Retry(self._attempt, self._retries + 1, exc.reason, delay)
        except BaseException:  # the end of an empty stream, a cancellation
            await items.aclose()
            raise
        self._items = items
        return item

    async def aclose(self) -> None:
        if self._items is not None:
            await self._items.aclose()
