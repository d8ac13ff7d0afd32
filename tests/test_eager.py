"""`eager`: a coroutine runs in the caller's step until it first waits, then as a task."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from chat_agent.eager import eager


async def test_a_coroutine_that_never_waits_is_done_before_eager_returns() -> None:
    ran: list[str] = []

    async def write() -> int:
        ran.append("write")
        return 7

    future = eager(write())
    assert ran == ["write"]  # in this step, not the loop's next turn
    assert future.done() and future.result() == 7


async def test_its_failure_is_the_futures_not_the_callers() -> None:
    async def broken() -> None:
        raise OSError("socket gone")

    future = eager(broken())
    assert future.done()
    with pytest.raises(OSError, match="socket gone"):
        future.result()


async def test_a_coroutine_that_waits_goes_on_as_a_task_with_what_it_waited_for() -> None:
    gate = asyncio.get_running_loop().create_future()
    steps: list[str] = []

    async def write() -> str:
        steps.append("before")
        value = await gate
        steps.append(f"after {value}")
        await asyncio.sleep(0)  # a bare yield as well
        return "written"

    future = eager(write())
    assert steps == ["before"] and not future.done()
    gate.set_result("open")
    assert await future == "written"
    assert steps == ["before", "after open"]


async def test_an_exception_it_waits_for_is_raised_where_it_waited() -> None:
    gate = asyncio.get_running_loop().create_future()

    async def write() -> str:
        try:
            await gate
        except ValueError as exc:
            return f"caught {exc}"
        return "not raised"

    future = eager(write())
    gate.set_exception(ValueError("refused"))
    assert await future == "caught refused"


async def test_cancelling_the_task_cancels_what_it_waits_for_and_reaches_the_coroutine() -> None:
    gate = asyncio.get_running_loop().create_future()
    cleaned: list[str] = []

    async def write() -> None:
        try:
            await gate
        finally:
            cleaned.append("finally")

    future = eager(write())
    await asyncio.sleep(0)  # the task waits now
    future.cancel()
    with pytest.raises(asyncio.CancelledError):
        await future
    assert gate.cancelled() and cleaned == ["finally"]


async def test_cancelled_while_what_it_waited_for_was_already_over() -> None:
    """The cancellation arrives as the awaited future completes: it is thrown in where the
    coroutine waits instead of being lost."""
    gate = asyncio.get_running_loop().create_future()
    seen: list[str] = []

    async def write() -> None:
        try:
            await gate
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    future = eager(write())
    await asyncio.sleep(0)
    gate.set_result(None)
    future.cancel()  # before the task's next step: what it waited for is over already
    with pytest.raises(asyncio.CancelledError):
        await future
    assert seen == ["cancelled"]


async def test_a_coroutine_cancelled_in_its_first_step_gives_a_cancelled_future() -> None:
    async def cancelled() -> None:
        raise asyncio.CancelledError

    assert eager(cancelled()).cancelled()


async def test_the_first_step_runs_in_the_callers_context() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("caller")

    async def read() -> str:
        return var.get()

    assert eager(read()).result() == "caller"
