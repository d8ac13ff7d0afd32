"""Debounced background jobs (titles, reflection), keyed so they can be restarted or cancelled.

    background.schedule(f"conv:{cid}:reflect", 300, lambda: reflect_job(cid))
    background.cancel(f"conv:{cid}")   # the conversation was deleted
    await background.close()           # shutting down

Each schedule is one task: it sleeps `delay`, waits for a job of the same key that is
already running (which is never interrupted by a newer schedule), then runs its job.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

log = logging.getLogger(__name__)

Job = Callable[[], Awaitable[None]]


class Background:
    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Task[None]] = {}  # at most one per key: newer replaces older
        self._running: dict[str, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # strong references until done
        self._closed = False

    def schedule(self, key: str, delay: float, job: Job) -> None:
        """Runs `job` after `delay` seconds, unless the same key is scheduled again first
        (the wait restarts for the newer job) or cancelled. After `close()`: ignored."""
        if self._closed:
            log.debug("background is closed; dropped job %s", key)
            return
        older = self._waiting.pop(key, None)
        if older is not None:
            older.cancel()
        task = asyncio.get_running_loop().create_task(self._wait_then_run(key, delay, job), name=f"background:{key}")
        self._waiting[key] = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel(self, prefix: str) -> None:
        """Cancels waiting and running jobs whose key starts with `prefix`."""
        for tasks in (self._waiting, self._running):
            for key in [k for k in tasks if k.startswith(prefix)]:
                tasks.pop(key).cancel()

    def waiting(self, key: str) -> bool:
        """Whether a job of `key` waits for its time (or for the one of its key that runs)."""
        return key in self._waiting

    def pending(self) -> list[str]:
        """Keys with a job waiting or running, sorted."""
        return sorted(set(self._waiting) | set(self._running))

    async def close(self) -> None:
        """Cancels every job and returns once all of them have ended."""
        self._closed = True
        self._waiting.clear()
        self._running.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _wait_then_run(self, key: str, delay: float, job: Job) -> None:
        me = asyncio.current_task()
        try:
            await asyncio.sleep(delay)
            while (earlier := self._running.get(key)) is not None:
                # asyncio.wait, unlike awaiting the task, never cancels it when we are cancelled.
                await asyncio.wait([earlier])
                if self._running.get(key) is earlier:  # it ended without its own clean-up
                    del self._running[key]
        finally:
            if self._waiting.get(key) is me:
                del self._waiting[key]
        self._running[key] = me  # type: ignore[assignment]
        try:
            await job()
        except Exception:
            log.exception("background job %s failed", key)
        finally:
            if self._running.get(key) is me:
                del self._running[key]
