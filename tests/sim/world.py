"""Virtual time: one event loop per simulated process, all on one virtual clock, stepped one
at a time by a seeded scheduler.

Each `SimLoop` is a plain asyncio loop (`BaseEventLoop`: the same ready queue, timers and
tasks as in production) whose `time()` is the world's clock and whose selector never
waits. The world steps one loop at a time (`_run_once`: the callbacks ready on it), choosing
among the loops with work by its seeded random generator, as processes running side by side
would interleave; when no loop has work it moves the clock to the next timer. So a run is a
function of its seed: nothing waits on the real clock, no thread runs, and every choice the
schedule makes comes from the seed.

A process is killed by never stepping its loop again (what it was doing just stops, as with
SIGKILL), and stalled by not stepping it for a while (SIGSTOP: its timers fire late, all at
once, when it goes on).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import random
import sys
import weakref
from asyncio import events
from typing import Any, Callable, Coroutine

EPOCH = 1_700_000_000.0  # the wall clock (`chat_agent.clock`) at virtual time 0
# Each step of a loop takes this long: time always moves on, as it does for real processes,
# so that code comparing the clock with a deadline it computed meets it (float sums round).
STEP_TIME = 1e-6
BUSY_STEPS = 200_000  # steps in a row without waiting for a timer: a livelock (a loop that never waits)


class Livelock(RuntimeError):
    """Tasks keep running without the clock moving (a busy loop that never waits)."""


class _Selector:
    """Nothing to poll: the world moves the clock instead of waiting."""

    def select(self, timeout: float | None) -> list[Any]:
        return []

    def close(self) -> None:
        pass


class SimLoop(asyncio.BaseEventLoop):
    def __init__(self, world: World, name: str):
        super().__init__()
        self._selector = _Selector()
        self.world = world
        self.name = name
        self.alive = True
        self.stalled_until = 0.0

    def time(self) -> float:
        return self.world.now

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def run_in_executor(self, executor: Any, func: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        raise RuntimeError(f"{self.name}: no threads in the simulation (run_in_executor of {func!r})")

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        self.world.unhandled(self, context)

    # ---- for the world ------------------------------------------------------------------------

    def has_work(self, now: float) -> bool:
        if self._ready:
            return True
        scheduled = self._scheduled
        return bool(scheduled) and scheduled[0]._when < now + self._clock_resolution

    def next_when(self) -> float | None:
        scheduled = self._scheduled
        while scheduled and scheduled[0]._cancelled:
            self._timer_cancelled_count -= 1
            heapq.heappop(scheduled)._scheduled = False
        return scheduled[0]._when if scheduled else None


class World:
    """The clock, the loops, and the timed events of the simulation itself (faults)."""

    def __init__(self, seed: int):
        self.rng = random.Random(f"schedule:{seed}")
        self.now = 0.0
        self.loops: list[SimLoop] = []  # alive
        self.graveyard: list[SimLoop] = []  # killed: kept, so that nothing of them runs (no GC finalizers)
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self.steps = 0
        self.unhandled_errors: list[str] = []
        self._agen_loops: weakref.WeakKeyDictionary[Any, SimLoop] = weakref.WeakKeyDictionary()
        self._hooks: Any = None

    def loop(self, name: str) -> SimLoop:
        loop = SimLoop(self, name)
        self.loops.append(loop)
        return loop

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Runs `action` (outside every loop) once the clock reaches `when`."""
        heapq.heappush(self._events, (when, next(self._order), action))

    def kill(self, loop: SimLoop) -> None:
        loop.alive = False
        if loop in self.loops:
            self.loops.remove(loop)
            self.graveyard.append(loop)

    def stall(self, loop: SimLoop, seconds: float) -> None:
        loop.stalled_until = max(loop.stalled_until, self.now + seconds)

    def unhandled(self, loop: SimLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        self.unhandled_errors.append(f"t={self.now:.3f} {loop.name}: {context.get('message')} {exc!r}")

    # ---- running -------------------------------------------------------------------------------

    def __enter__(self) -> World:
        self._hooks = sys.get_asyncgen_hooks()
        sys.set_asyncgen_hooks(firstiter=self._first_iteration, finalizer=self._finalize)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.set_asyncgen_hooks(*self._hooks)

    def _first_iteration(self, agen: Any) -> None:
        loop = events._get_running_loop()
        if isinstance(loop, SimLoop):
            self._agen_loops[agen] = loop

    def _finalize(self, agen: Any) -> None:
        # An async generator dropped unfinished is closed on its own loop, as asyncio does.
        loop = self._agen_loops.get(agen)
        if loop is not None and loop.alive and not loop.is_closed():
            loop.call_soon(loop.create_task, agen.aclose())

    def run(self, until: float, done: Callable[[], bool] | None = None) -> bool:
        """Runs until `done()` (True) or the clock reaches `until` (False)."""
        same = 0
        while True:
            if done is not None and done():
                return True
            now = self.now
            ready = [loop for loop in self.loops if loop.stalled_until <= now and loop.has_work(now)]
            if ready:
                loop = ready[0] if len(ready) == 1 else self.rng.choice(ready)
                self._step(loop)
                same += 1
                if same > BUSY_STEPS:
                    busy = sorted({repr(handle)[:160] for loop in self.loops for handle in loop._ready})
                    raise Livelock(f"{BUSY_STEPS} steps at t={now:.3f} without the clock moving; ready: {busy[:4]}")
                continue
            same = 0
            when = self._next(now)
            if when is None or when > until:
                self.now = max(now, until)
                self._fire(self.now)
                return done is not None and done()
            self.now = max(now, when)
            self._fire(self.now)

    def _next(self, now: float) -> float | None:
        candidates = [self._events[0][0]] if self._events else []
        for loop in self.loops:
            if loop.stalled_until > now:
                candidates.append(loop.stalled_until)
                continue
            when = loop.next_when()
            if when is not None:
                candidates.append(when)
        return min(candidates) if candidates else None

    def _fire(self, now: float) -> None:
        while self._events and self._events[0][0] <= now:
            heapq.heappop(self._events)[2]()

    def _step(self, loop: SimLoop) -> None:
        self.steps += 1
        events._set_running_loop(loop)
        try:
            loop._run_once()
        finally:
            events._set_running_loop(None)
        self.now += STEP_TIME

    def tear_down(self) -> None:
        """Ends what every loop (killed ones too) still runs, then closes them: every task is
        cancelled and the loops run until they are done (what a coroutine does on its way out
        runs now, on its own loop, not when the garbage collector finalizes it later, in the
        middle of another run). What still will not end has its coroutine closed."""
        loops = self.loops + self.graveyard
        self.graveyard = []
        for loop in loops:
            loop.alive = True
            loop.stalled_until = 0.0
        self.loops = loops

        def pending() -> list[asyncio.Task[Any]]:
            return [task for loop in loops for task in asyncio.all_tasks(loop) if not task.done()]

        for _ in range(5):
            tasks = pending()
            if not tasks:
                break
            for task in tasks:
                task.cancel()
            self.run(self.now + 60.0, done=lambda: all(task.done() for task in tasks))
        hook = sys.unraisablehook
        sys.unraisablehook = lambda unraisable: None  # coroutines that await in a finally: closed anyway
        # Closing runs `finally` blocks outside their tasks' contexts: tracing's context tokens
        # cannot be reset there, and OpenTelemetry logs so.
        otel = logging.getLogger("opentelemetry.context")
        otel_disabled, otel.disabled = otel.disabled, True
        try:
            for loop in loops:
                loop.alive = False
                events._set_running_loop(loop)
                try:
                    for _ in range(10):  # what closing starts (a task spawned in a finally) is closed too
                        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
                        if not left:
                            break
                        for task in left:
                            _close(task)
                        loop._ready.clear()
                finally:
                    events._set_running_loop(None)
                loop._ready.clear()
                loop._scheduled.clear()
                loop.close()
        finally:
            sys.unraisablehook = hook
            otel.disabled = otel_disabled
        self.loops = []


def _close(task: asyncio.Task[Any]) -> None:
    """Closes a task's coroutine (and the ones it awaits); a coroutine
    that awaits again in a `finally` is closed again where it stopped."""
    coroutine = task.get_coro()
    for _ in range(10):
        if getattr(coroutine, "cr_frame", None) is None:
            break
        try:
            coroutine.close()
        except BaseException:  # noqa: BLE001 - it awaited while being closed: closed again
            pass
    # The task stays pending (never to run again); it only says so to its own loop if collected.
    task._log_destroy_pending = False  # type: ignore[attr-defined]


def at_once(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Runs a coroutine that never waits (the inline store's reads, its open and close) to its
    end, outside every loop."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    coroutine.close()
    raise RuntimeError("expected a coroutine that does not wait")
