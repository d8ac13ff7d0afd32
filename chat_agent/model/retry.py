"""Another try of a streamed call that failed before anything of it reached the caller.

Both clients need it: an error inside a 200 stream (a mid-stream `overloaded_error`, a
connection that broke off) is never retried by the SDKs, which retry only HTTP statuses.
"""

from __future__ import annotations

import asyncio
import logging
import random
from contextlib import aclosing
from typing import AsyncIterator, Callable

from chat_agent.model.types import LLMError, StreamItem

log = logging.getLogger(__name__)


async def retry_unstarted(attempt_stream: Callable[[], AsyncIterator[StreamItem]], *, retries: int,
                          backoff: float) -> AsyncIterator[StreamItem]:
    """Yields what `attempt_stream()` yields; when it raises a retryable LLMError before it
    yielded anything, waits (exponential backoff with jitter) and starts it again."""
    attempt = 0
    while True:
        yielded = False
        try:
            async with aclosing(attempt_stream()) as items:  # type: ignore[type-var]
                async for item in items:
                    yielded = True
                    yield item
            return
        except LLMError as exc:
            if yielded or not exc.retryable or attempt >= retries:
                raise
        attempt += 1
        delay = backoff * (2 ** (attempt - 1)) * (0.75 + random.random() / 2)
        log.warning("model stream failed before any output; retry %d in %.2fs", attempt, delay)
        await asyncio.sleep(delay)
