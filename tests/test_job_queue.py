"""The job queue's interface on both backends: in this process (LocalQueue) and in PostgreSQL
(ProcrastinateQueue, on a schema of its own), with what only the shared one promises: a job
runs once whichever instance deferred it and however many workers there are, a debounce
restarted from another instance, a job stopped with its instance (or killed with it) runs
again elsewhere, and instances starting together install the tables once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from chat_agent.sessions.pg_queue import ProcrastinateQueue, install_schema
from chat_agent.sessions.queue import Job, JobQueue, LocalQueue
from tests import pace, pg, reaper

TITLE = Job("title", "alice", "c1")
REFLECTION = Job("reflection", "alice", "c1")
OTHER = Job("title", "alice", "c2")
QUIET = 1.5  # seconds to watch for a job that must not run (well past the shared queue's poll)


class Runs:
    """What ran, when, and how many of a key at once; `hold` keeps the named kinds running
    until `release` is set."""

    def __init__(self, hold: frozenset[str] = frozenset(), fail: frozenset[str] = frozenset()) -> None:
        self.started: list[tuple[str, float]] = []
        self.finished: list[str] = []
        self.cancelled: list[str] = []
        self.running: dict[str, int] = {}
        self.most_at_once = 0
        self.release = asyncio.Event()
        self.hold, self.fail = hold, fail

    async def __call__(self, job: Job) -> None:
        self.started.append((job.key, time.monotonic()))
        self.running[job.key] = self.running.get(job.key, 0) + 1
        self.most_at_once = max(self.most_at_once, self.running[job.key])
        try:
            if job.kind in self.hold:
                await self.release.wait()
            if job.kind in self.fail:
                raise ValueError("boom")
            self.finished.append(job.key)
        except asyncio.CancelledError:
            self.cancelled.append(job.key)
            raise
        finally:
            self.running[job.key] -= 1

    def keys(self) -> list[str]:
        return [key for key, _ in self.started]


async def until(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


MakeQueue = Callable[[Runs], Awaitable[JobQueue]]


@contextlib.asynccontextmanager
async def queues(backend: str) -> AsyncIterator[MakeQueue]:
    """`await make(runs)`: a started queue; on PostgreSQL each one is another instance on one
    fresh schema (`make.url`). All of them are closed afterwards."""
    opened: list[JobQueue] = []
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(pg.isolated_database()) if backend == "postgres" else ""

        async def make(runs: Runs) -> JobQueue:
            queue: JobQueue = ProcrastinateQueue(url, instance=f"test{len(opened)}", poll=0.2, grace=0.5,
                                                 stalled=2.0, heartbeat=0.5) if url else LocalQueue()
            await queue.start(runs)
            opened.append(queue)
            return queue

        make.url = url  # type: ignore[attr-defined]
        try:
            yield make
        finally:
            for queue in opened:
                await queue.close()


@pytest.fixture(params=["local", "postgres"])
async def make_queue(request: pytest.FixtureRequest) -> AsyncIterator[MakeQueue]:
    async with queues(request.param) as make:
        yield make


@pytest.fixture
async def shared() -> AsyncIterator[MakeQueue]:
    """Queues in PostgreSQL: several instances share them."""
    async with queues("postgres") as make:
        yield make


async def test_a_job_runs_once_after_its_delay(make_queue):
    runs = Runs()
    queue = await make_queue(runs)
    deferred = time.monotonic()
    await queue.defer(TITLE, 0.4)
    await until(lambda: runs.finished == [TITLE.key])
    assert runs.started[0][1] - deferred >= 0.4
    await asyncio.sleep(QUIET)
    assert runs.keys() == [TITLE.key]


async def test_a_second_deferral_of_a_waiting_job_changes_nothing(make_queue):
    runs = Runs()
    queue = await make_queue(runs)
    deferred = time.monotonic()
    await queue.defer(TITLE, 1.0)
    await queue.defer(TITLE, 0.0)  # one waits already: it is kept, due when it was
    await queue.defer(OTHER, 0.0)  # another conversation's is its own
    await until(lambda: runs.finished == [OTHER.key, TITLE.key])
    assert dict(runs.started)[TITLE.key] - deferred >= 1.0
    await asyncio.sleep(QUIET)
    assert sorted(runs.keys()) == sorted([TITLE.key, OTHER.key])


async def test_restarting_the_wait_debounces(make_queue):
    runs = Runs()
    queue = await make_queue(runs)
    await queue.defer(REFLECTION, 1.0, restart=True)
    await asyncio.sleep(0.5)
    restarted = time.monotonic()
    await queue.defer(REFLECTION, 1.0, restart=True)
    await until(lambda: runs.finished == [REFLECTION.key])
    assert runs.started[0][1] - restarted >= 1.0  # the first wait did not count
    await asyncio.sleep(QUIET)
    assert runs.keys() == [REFLECTION.key]


async def test_a_running_job_is_not_interrupted_and_the_next_waits_for_it(make_queue):
    runs = Runs(hold=frozenset({"reflection"}))
    queue = await make_queue(runs)
    await queue.defer(REFLECTION, 0)
    await until(lambda: len(runs.started) == 1)
    await queue.defer(REFLECTION, 0)  # it runs: a new one waits for it
    await asyncio.sleep(QUIET)
    assert len(runs.started) == 1 and runs.cancelled == []
    runs.release.set()
    await until(lambda: runs.finished == [REFLECTION.key, REFLECTION.key])
    assert runs.most_at_once == 1


async def test_cancel_drops_a_conversation_s_jobs_and_stops_its_running_one(make_queue):
    runs = Runs(hold=frozenset({"title"}))
    queue = await make_queue(runs)
    await queue.defer(TITLE, 0)
    await until(lambda: runs.keys() == [TITLE.key])
    await queue.defer(REFLECTION, 0.5, restart=True)
    await queue.defer(Job("reflection", "alice", "c2"), 0.5)
    await queue.cancel("c1")
    await until(lambda: runs.cancelled == [TITLE.key])
    await until(lambda: runs.finished == ["conv:c2:reflection"])
    await asyncio.sleep(QUIET)
    assert runs.keys() == [TITLE.key, "conv:c2:reflection"]


async def test_a_failing_job_is_logged_and_its_key_is_usable_again(make_queue, caplog):
    runs = Runs(fail=frozenset({"title"}))
    queue = await make_queue(runs)
    with caplog.at_level(logging.ERROR):
        await queue.defer(TITLE, 0)
        await until(lambda: len(runs.started) == 1)
        await asyncio.sleep(0.3)
        runs.fail = frozenset()
        await queue.defer(TITLE, 0)
        await until(lambda: runs.finished == [TITLE.key])
    assert f"background job {TITLE.key} failed" in caplog.text and "boom" in caplog.text
    await asyncio.sleep(QUIET)
    assert len(runs.started) == 2  # a failure is not retried


# ---- only the shared queue ------------------------------------------------------------------

async def test_jobs_deferred_on_any_instance_run_once_across_all(shared):
    runs = Runs()
    queues = [await shared(runs) for _ in range(3)]
    jobs = [Job(kind, "alice", f"c{n}") for n in range(8) for kind in ("title", "reflection")]
    # Every instance defers every job (three instances ending turns of the same conversations).
    await asyncio.gather(*(queue.defer(job, 0.3) for job in jobs for queue in queues))
    await until(lambda: len(runs.finished) == len(jobs))
    await asyncio.sleep(QUIET)
    assert sorted(runs.keys()) == sorted(job.key for job in jobs)


async def test_a_debounce_restarted_on_another_instance(shared):
    runs = Runs()
    a, b = await shared(runs), await shared(runs)
    await a.defer(REFLECTION, 1.0, restart=True)
    await asyncio.sleep(0.5)
    restarted = time.monotonic()
    await b.defer(REFLECTION, 1.0, restart=True)  # the newer turn ran on B
    await until(lambda: runs.finished == [REFLECTION.key])
    assert runs.started[0][1] - restarted >= 1.0
    await asyncio.sleep(QUIET)
    assert runs.keys() == [REFLECTION.key]


async def test_a_job_stopped_with_its_instance_runs_again_on_another(shared):
    held = Runs(hold=frozenset({"title"}))
    stopping = await shared(held)
    await stopping.defer(TITLE, 0)
    await until(lambda: held.keys() == [TITLE.key])
    runs = Runs()
    await shared(runs)  # another instance
    await stopping.close()  # a rolling restart: the job is stopped after the grace...
    assert held.cancelled == [TITLE.key]
    await until(lambda: runs.finished == [TITLE.key])  # ... and runs again elsewhere


KILLED_WORKER = textwrap.dedent("""
    import asyncio, sys
    from chat_agent.sessions.pg_queue import ProcrastinateQueue
    from chat_agent.sessions.queue import Job

    async def main():
        async def run(job):
            print("running", job.key, flush=True)
            await asyncio.Event().wait()  # until killed
        queue = ProcrastinateQueue(sys.argv[1], instance="doomed", poll=0.2, stalled=2.0, heartbeat=0.5)
        await queue.start(run)
        await queue.defer(Job("title", "alice", "c1"), 0)
        await asyncio.Event().wait()

    asyncio.run(main())
""")


async def test_a_job_of_a_killed_instance_runs_again_on_another(shared):
    doomed = reaper.spawn([sys.executable, "-c", KILLED_WORKER, shared.url], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        line = await asyncio.wait_for(asyncio.to_thread(doomed.stdout.readline), 30)  # type: ignore[union-attr]
        assert line.split() == ["running", TITLE.key]
    finally:
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        doomed.stdout.close()  # type: ignore[union-attr]
    killed = time.monotonic()
    runs = Runs()
    await shared(runs)
    await until(lambda: runs.finished == [TITLE.key], timeout=30)
    assert time.monotonic() - killed < pace.scaled(20)  # stalled after 2 s without a heartbeat, then put back


async def test_instances_starting_together_install_the_tables_once(pg_url):
    installed = await asyncio.gather(*(install_schema(pg_url) for _ in range(4)))
    assert sorted(installed) == [False, False, False, True]
    schema = pg_url.rpartition("search_path%3D")[2]
    tables = {t for (t,) in pg.query(pg_url, "SELECT tablename FROM pg_tables WHERE schemaname = $1", (schema,))}
    assert {"procrastinate_jobs", "procrastinate_workers", "procrastinate_events"} <= tables
    assert not await install_schema(pg_url)  # a later start finds them
