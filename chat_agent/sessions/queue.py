"""Where the background jobs of conversations (a title, the debounced reflection) wait until
they are due, and run: one small interface, two implementations.

- `LocalQueue`, in this process (`Background`'s tasks): one instance on SQLite, no other
  service to run. Waiting jobs end with the process.
- `ProcrastinateQueue` (pg_queue.py), in PostgreSQL: several instances on one database
  share it, each due job runs once, on whichever instance's worker takes it, and waiting
  jobs outlive any one instance.

A job is keyed by its kind and its conversation. At most one job of a key waits at a time,
and one that runs is never interrupted by a newer one of its key, which waits for it.

    await queue.start(run)                                   # run(job) for each due job
    await queue.defer(Job("title", owner, cid), 0)           # unless one waits already
    await queue.defer(Job("reflection", owner, cid), 300, restart=True)  # debounced
    await queue.cancel(cid)                                  # the conversation was deleted
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from chat_agent.sessions.background import Background


@dataclass(frozen=True, slots=True)
class Job:
    kind: str  # what to do: "title", "reflection"
    owner: str  # the user whose conversation it is
    conversation_id: str

    @property
    def key(self) -> str:
        return f"{conversation_prefix(self.conversation_id)}{self.kind}"


def conversation_prefix(conversation_id: str) -> str:
    """What the keys of one conversation's jobs start with."""
    return f"conv:{conversation_id}:"


RunJob = Callable[[Job], Awaitable[None]]


class JobQueue(Protocol):
    kind: str  # what `GET /health` says it is

    async def start(self, run: RunJob) -> None:
        """From now on, each job runs once it is due: `run(job)`, on this instance or (where
        the queue is shared) another one."""

    async def defer(self, job: Job, delay: float, *, restart: bool = False) -> None:
        """`job` runs `delay` seconds from now. Where one of its key waits already, that one
        is kept as it is (restart False), or its wait starts again from now (restart True:
        a debounce)."""

    async def cancel(self, conversation_id: str) -> None:
        """Drops the conversation's waiting jobs and stops those that run."""

    async def close(self) -> None:
        """Stops running jobs here and taking new ones, and returns once they ended. In a
        shared queue, what waits stays there, and what was stopped runs again elsewhere."""


class LocalQueue:
    """The queue in this process."""

    kind = "local"

    def __init__(self) -> None:
        self._background = Background()
        self._run: RunJob | None = None

    async def start(self, run: RunJob) -> None:
        self._run = run

    async def defer(self, job: Job, delay: float, *, restart: bool = False) -> None:
        if not restart and self._background.waiting(job.key):
            return
        self._background.schedule(job.key, delay, lambda: self._running(job))

    async def cancel(self, conversation_id: str) -> None:
        self._background.cancel(conversation_prefix(conversation_id))

    async def close(self) -> None:
        await self._background.close()

    async def _running(self, job: Job) -> None:
        if self._run is None:
            raise RuntimeError("the job queue was not started")
        await self._run(job)
