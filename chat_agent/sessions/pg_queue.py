"""The job queue on PostgreSQL, shared by every instance on the database: procrastinate's
tables beside the store's, and a procrastinate worker in each instance's event loop.

- A job is a procrastinate job of one task (`TASK`, on queue `QUEUE`) whose `queueing_lock`
  and `lock` are both its key: at most one job of a key waits (procrastinate refuses a second
  one, `AlreadyEnqueued`), and the jobs of a key run one at a time, in order, so one that runs
  is never interrupted by the next.
- A delay is procrastinate's `schedule_in`. Restarting a wait (the reflection's debounce)
  deletes the waiting job and defers it anew, from whichever instance ran the newer turn.
- Every instance's worker takes due jobs: at once when one is deferred (LISTEN/NOTIFY), and
  by a poll every `POLL` seconds for those whose time has come. A job is taken by one worker
  (`FOR UPDATE SKIP LOCKED`), so it runs once, wherever.
- An instance that stops (SIGTERM) gives running jobs `GRACE` seconds, then stops them; they
  go back in the queue, and another instance runs them. One that dies (kill -9) stops
  beating: `STALLED` seconds later another instance puts its jobs back in the queue.
- Finished jobs are deleted: the table holds what waits and what runs.
- The tables are procrastinate's own `schema.sql`, applied at the first start in the first
  schema of the URL's `search_path` (the store's), under an advisory lock of that schema, so
  that instances starting together apply it once.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
from typing import Any

import procrastinate
import psycopg
from procrastinate.exceptions import AlreadyEnqueued, JobAborted
from procrastinate.jobs import Job as ProcrastinateJob
from procrastinate.schema import SchemaManager

from chat_agent.sessions.queue import Job, RunJob, conversation_prefix
from chat_agent.store.pg_pool import SIDE_POOL

log = logging.getLogger(__name__)

QUEUE = "chat-agent"
TASK = "chat_agent.conversation_job"
KINDS = ("title", "reflection")  # what `cancel` looks for
POLL = 1.0  # seconds between looks for jobs whose time came (deferred ones are noticed at once)
CONCURRENCY = 8  # jobs one instance runs at once (each waits on a model call, mostly)
GRACE = 2.0  # seconds a stopping instance lets its running jobs finish before stopping them
HEARTBEAT = 10.0  # seconds between a worker's signs of life
STALLED = 30.0  # seconds without one after which its jobs run elsewhere
RETRIES = 3  # times a job stopped with its instance runs again
RESTART = 5.0  # seconds before a worker that stopped by itself (its database went away) starts again
DEFER_ATTEMPTS = 5  # a restart that keeps meeting another instance's deferral gives up after these
CLOSE_WAIT = 5.0  # seconds past the grace a closing worker may take to say goodbye to the database

_SCHEMA_LOCK = ("SELECT pg_advisory_xact_lock(hashtext('chat-agent job queue'),"
                " hashtext(COALESCE(current_schema(), '')))")
_INSTALLED = ("SELECT obj_description(c.oid, 'pg_class') FROM pg_class c"
              " WHERE c.relname = 'procrastinate_jobs' AND c.relnamespace = CAST(current_schema() AS regnamespace)")
_MARK = "procrastinate "  # the table's comment says which version's schema.sql made it


class _AgainWhenStopped(procrastinate.BaseRetryStrategy):
    """A job stopped because its instance stopped runs again at once (elsewhere); a job that
    failed does not (its failure was logged). A job stopped because its conversation was
    deleted is not either: procrastinate fails a job whose abort was asked for instead."""

    def get_retry_decision(self, *, exception: BaseException,
                           job: ProcrastinateJob) -> procrastinate.RetryDecision | None:
        if isinstance(exception, (asyncio.CancelledError, JobAborted)) and job.attempts < RETRIES:
            return procrastinate.RetryDecision(retry_in={"seconds": 0})
        return None


class ProcrastinateQueue:
    """The shared queue; `url` is the store's (libpq's URL, its `search_path` included)."""

    kind = "postgresql"

    def __init__(self, url: str, *, instance: str = "chat-agent", poll: float = POLL, grace: float = GRACE,
                 stalled: float = STALLED, heartbeat: float = HEARTBEAT, pool_size: int = SIDE_POOL) -> None:
        self._url = url
        self._instance = instance
        self._poll, self._grace, self._stalled, self._heartbeat = poll, grace, stalled, heartbeat
        self._app = procrastinate.App(connector=procrastinate.PsycopgConnector(
            conninfo=url, min_size=1, max_size=pool_size, name="chat-agent-jobs"))
        self._task = self._app.task(name=TASK, queue=QUEUE, retry=_AgainWhenStopped())(self._job)
        self._run: RunJob | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False

    async def start(self, run: RunJob) -> None:
        self._run = run
        await install_schema(self._url)
        await self._app.open_async()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._work(), name="job-worker"),
                       loop.create_task(self._requeue_stalled(), name="job-requeue")]

    async def defer(self, job: Job, delay: float, *, restart: bool = False) -> None:
        deferrer = self._task.configure(lock=job.key, queueing_lock=job.key, schedule_in={"seconds": delay})
        for _ in range(DEFER_ATTEMPTS):
            try:
                await deferrer.defer_async(kind=job.kind, owner=job.owner, conversation_id=job.conversation_id)
                return
            except AlreadyEnqueued:
                if not restart:
                    return
            # One waits: its wait starts again as this one. (Another instance may defer
            # between the delete and the deferral: then its job is the one deleted next.)
            for waiting in await self._app.job_manager.list_jobs_async(queueing_lock=job.key, status="todo"):
                await self._app.job_manager.cancel_job_by_id_async(waiting.id, delete_job=True)  # type: ignore[arg-type]
        log.warning("could not restart the wait of job %s: other instances kept deferring it", job.key)

    async def cancel(self, conversation_id: str) -> None:
        for kind in KINDS:
            for found in await self._jobs(f"{conversation_prefix(conversation_id)}{kind}"):
                # A waiting one is deleted, a running one stopped (its worker is told).
                await self._app.job_manager.cancel_job_by_id_async(found.id, abort=True,  # type: ignore[arg-type]
                                                                   delete_job=True)

    async def close(self) -> None:
        self._closing = True
        for task in self._tasks:
            task.cancel()  # the worker lets running jobs finish (GRACE), then stops them
        if self._tasks:
            _, late = await asyncio.wait(self._tasks, timeout=self._grace + CLOSE_WAIT)
            if late:
                log.warning("the job worker did not stop in time")
        self._tasks = []
        await self._app.close_async()

    async def _jobs(self, key: str) -> list[ProcrastinateJob]:
        """The jobs of `key` that wait or run."""
        found = await self._app.job_manager.list_jobs_async(lock=key)
        return [job for job in found if job.status in ("todo", "doing")]

    async def _job(self, kind: str, owner: str, conversation_id: str) -> None:
        """procrastinate's task: one due job, here."""
        job = Job(kind, owner, conversation_id)
        if self._run is None:
            raise RuntimeError("the job queue was not started")
        try:
            await self._run(job)
        except Exception:  # logged like Background's; cancellation goes on (a retry elsewhere)
            log.exception("background job %s failed", job.key)

    async def _work(self) -> None:
        """The worker, started again should it stop by itself (a side task of it failed)."""
        options: dict[str, Any] = {
            "queues": [QUEUE], "name": f"jobs-{self._instance}", "concurrency": CONCURRENCY,
            "fetch_job_polling_interval": self._poll, "shutdown_graceful_timeout": self._grace,
            "delete_jobs": "always", "install_signal_handlers": False,
            "update_heartbeat_interval": self._heartbeat, "stalled_worker_timeout": self._stalled,
        }
        while True:
            try:
                await self._app.run_worker_async(**options)
            except Exception:
                if self._closing:  # it failed on its way out (the database is gone, say): out all the same
                    return
                log.exception("the job worker failed; starting it again in %.0f s", RESTART)
            else:
                if self._closing:
                    return
                log.warning("the job worker stopped; starting it again in %.0f s", RESTART)
            await asyncio.sleep(RESTART)

    async def _requeue_stalled(self) -> None:
        """Puts the jobs of dead instances (no heartbeat for `stalled` seconds) back in the
        queue. Every instance looks; of two that find one job, one puts it back."""
        manager = self._app.job_manager
        while True:
            await asyncio.sleep(self._stalled / 2)
            try:
                stalled = await manager.get_stalled_jobs(queue=QUEUE, seconds_since_heartbeat=self._stalled)
            except Exception as exc:
                log.warning("could not look for stalled background jobs: %s", exc)
                continue
            for job in stalled:
                try:
                    await manager.retry_job(job)
                    log.warning("background job %s was stopped with its instance; it runs again",
                                job.queueing_lock)
                except Exception as exc:  # another instance put it back first
                    log.debug("could not put job %s back: %s", job.id, exc)


async def install_schema(url: str) -> bool:
    """Applies procrastinate's schema in the first schema of `url`'s search_path unless it is
    there; whether this call applied it. A schema made by another procrastinate version is
    kept, with a warning: upgrading it is procrastinate's migrations' job."""
    version = importlib.metadata.version("procrastinate")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        async with conn.transaction():
            await conn.execute(_SCHEMA_LOCK)
            row = await (await conn.execute(_INSTALLED)).fetchone()
            if row is None:
                await conn.execute(SchemaManager.get_schema())
                await conn.execute(f"COMMENT ON TABLE procrastinate_jobs IS '{_MARK}{version}'")  # type: ignore[arg-type]
                return True
    made_by = str(row[0] or "").removeprefix(_MARK) or "an unknown version"
    if made_by != version:
        log.warning("the job queue's tables were made by procrastinate %s, and this is %s: apply procrastinate's "
                    "migrations between them (its sql/migrations)", made_by, version)
    return False
