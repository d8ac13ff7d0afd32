"""Background: debouncing, cancelling by prefix, jobs that run on, failures, shutdown."""

from __future__ import annotations

import asyncio
import logging

import pytest

from chat_agent.sessions.background import Background

TICK = 0.02


class Recorder:
    """Jobs that note when they start and end; `hold` keeps them running until released."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.started_at: dict[str, float] = {}
        self.finished: list[str] = []
        self.cancelled: list[str] = []
        self.release = asyncio.Event()

    def job(self, name: str, hold: bool = False):
        async def run() -> None:
            self.started.append(name)
            self.started_at[name] = asyncio.get_running_loop().time()
            try:
                if hold:
                    await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled.append(name)
                raise
            self.finished.append(name)

        return run


async def until(condition, timeout: float = 2.0) -> None:
    """Polls instead of sleeping a fixed time: fast when things are fast, not flaky when slow."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.002)


def background_tasks() -> list[asyncio.Task]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("background:")]


@pytest.fixture
async def background():
    bg = Background()
    yield bg
    await bg.close()
    assert background_tasks() == []  # nothing leaks past close


async def test_runs_after_the_delay(background):
    rec = Recorder()
    loop = asyncio.get_running_loop()
    scheduled = loop.time()
    background.schedule("conv:1:title", TICK, rec.job("a"))
    assert background.pending() == ["conv:1:title"] and rec.started == []
    await until(lambda: rec.finished == ["a"])
    assert rec.started_at["a"] >= scheduled + TICK
    await until(lambda: background_tasks() == [])
    assert background.pending() == []


async def test_a_newer_schedule_restarts_the_wait(background):
    rec = Recorder()
    loop = asyncio.get_running_loop()
    background.schedule("k", TICK * 3, rec.job("first"))
    await asyncio.sleep(TICK)
    rescheduled = loop.time()
    background.schedule("k", TICK * 3, rec.job("second"))
    await until(lambda: rec.finished == ["second"])
    assert rec.started == ["second"]  # the first never ran
    assert rec.started_at["second"] >= rescheduled + TICK * 3


async def test_other_keys_are_independent(background):
    rec = Recorder()
    background.schedule("a", TICK, rec.job("a"))
    background.schedule("b", TICK, rec.job("b"))
    await until(lambda: sorted(rec.finished) == ["a", "b"])


async def test_a_running_job_is_not_cancelled_by_a_reschedule(background):
    rec = Recorder()
    background.schedule("k", 0, rec.job("first", hold=True))
    await until(lambda: rec.started == ["first"])
    background.schedule("k", 0, rec.job("second"))
    await asyncio.sleep(TICK)
    assert rec.started == ["first"] and rec.cancelled == []  # second waits for first to end
    assert background.pending() == ["k"]
    rec.release.set()
    await until(lambda: rec.finished == ["first", "second"])
    await until(lambda: background.pending() == [])


async def test_cancel_by_prefix(background):
    rec = Recorder()
    background.schedule("conv:1:title", 0, rec.job("running", hold=True))
    background.schedule("conv:1:reflect", 10, rec.job("waiting"))
    background.schedule("conv:10:title", 10, rec.job("other"))
    await until(lambda: rec.started == ["running"])
    background.cancel("conv:1:")
    assert background.pending() == ["conv:10:title"]
    await until(lambda: rec.cancelled == ["running"])
    assert rec.started == ["running"]
    background.schedule("conv:10:title", 0, rec.job("other"))  # the survivor still runs
    await until(lambda: rec.finished == ["other"])


async def test_failures_are_logged_not_raised(background, caplog):
    async def broken() -> None:
        raise ValueError("boom")

    rec = Recorder()
    with caplog.at_level(logging.ERROR, logger="chat_agent.background"):
        background.schedule("bad", 0, broken)
        await until(lambda: background.pending() == [])
        background.schedule("bad", 0, rec.job("again"))  # the key is usable after a failure
        await until(lambda: rec.finished == ["again"])
    assert "background job bad failed" in caplog.text and "boom" in caplog.text


async def test_close_cancels_and_waits(background):
    rec = Recorder()
    background.schedule("a", 0, rec.job("running", hold=True))
    background.schedule("b", 10, rec.job("waiting"))
    await until(lambda: rec.started == ["running"])
    await background.close()
    assert rec.cancelled == ["running"] and rec.started == ["running"]
    assert background.pending() == [] and background_tasks() == []
    background.schedule("c", 0, rec.job("late"))  # ignored once closed
    await asyncio.sleep(TICK)
    assert rec.started == ["running"] and background_tasks() == []
