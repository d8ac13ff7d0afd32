"""`python server.py` with the benchmark tools (bench_tools.py) added to its registry.

Everything else is the real server: `server.main()` with its uvicorn settings and
configuration from the environment; only the registry it composes gets the bench tools.
BENCH_TOOLS=noop,sleep (names, comma-separated) offers only those, and none of the
product's tools, so that the model requests equal those of the other variants a benchmark
compares; by default all of them are added to the product's tools.

    python bench/bench_server.py      # same environment variables as server.py

BENCH_PROFILE=path runs the server under cProfile; `kill -USR1 <pid>` writes the stats so
collected since the last
signal to that path (uvicorn ends on a re-raised signal, so there is no "at exit" to hook).
BENCH_TRACEMALLOC=path traces allocations (10 frames deep); `kill -USR2 <pid>` writes a
snapshot to path.N (N = 1, 2, ...): compare two with bench/alloc_diff.py, what each idle
socket holds say.
BENCH_SLOW_CALLBACKS=path appends a line to path for each event-loop callback that held the
loop longer than BENCH_SLOW_MS (20): its duration, and for a task's step the coroutines it
was suspended in after it (where a long step ended up): what makes urgent frames wait. It
runs the server on asyncio's own loop instead of uvloop, whose callbacks cannot be timed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import server  # noqa: E402
import tools  # noqa: E402
from bench_tools import BENCH_TOOLS  # noqa: E402
from chat_agent.tooling import ToolRegistry  # noqa: E402


def build_registry(settings):
    wanted = {name for name in os.environ.get("BENCH_TOOLS", "").split(",") if name}
    registry = ToolRegistry(default_timeout=settings.tool_timeout, output_chars=settings.tool_output_chars) \
        if wanted else tools.build_registry(settings)
    for tool in BENCH_TOOLS:
        if not wanted or tool.name in wanted:
            registry.add(tool)
    return registry


def profile_to(path: str) -> None:
    import cProfile
    import signal

    profiler = cProfile.Profile()

    def dump(signum, frame) -> None:
        profiler.disable()
        profiler.dump_stats(path)
        profiler.clear()
        profiler.enable()

    signal.signal(signal.SIGUSR1, dump)
    profiler.enable()


def trace_to(path: str) -> None:
    import signal
    import tracemalloc

    tracemalloc.start(10)
    taken = [0]

    def snapshot(signum, frame) -> None:
        taken[0] += 1
        tracemalloc.take_snapshot().dump(f"{path}.{taken[0]}")

    signal.signal(signal.SIGUSR2, snapshot)


def slow_callbacks_to(path: str, threshold: float) -> None:
    import asyncio.events
    import time

    out = open(path, "a", buffering=1)
    run = asyncio.events.Handle._run

    def where(callback) -> str:
        task = getattr(callback, "__self__", None)
        coro = task.get_coro() if isinstance(task, asyncio.Task) else None
        chain = []
        while coro is not None and len(chain) < 12:
            code = getattr(coro, "cr_code", None) or getattr(coro, "ag_code", None) or getattr(coro, "gi_code", None)
            chain.append(code.co_qualname if code is not None else type(coro).__name__)
            coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None) or getattr(coro, "gi_yieldfrom", None)
        return " > ".join(chain) if chain else repr(callback)[:200]

    def timed(self) -> None:
        started = time.perf_counter()
        run(self)
        took = time.perf_counter() - started
        if took >= threshold:
            out.write(f"{took * 1000:.1f} ms {where(self._callback)}\n")

    asyncio.events.Handle._run = timed
    import uvicorn

    made = uvicorn.Config.__init__

    def on_asyncio(self, *args, **kwargs) -> None:
        made(self, *args, **{**kwargs, "loop": "asyncio"})

    uvicorn.Config.__init__ = on_asyncio


if __name__ == "__main__":
    if os.environ.get("BENCH_SLOW_CALLBACKS"):
        slow_callbacks_to(os.environ["BENCH_SLOW_CALLBACKS"], float(os.environ.get("BENCH_SLOW_MS", "20")) / 1000)
    if os.environ.get("BENCH_TRACEMALLOC"):
        trace_to(os.environ["BENCH_TRACEMALLOC"])
    if os.environ.get("BENCH_PROFILE"):
        profile_to(os.environ["BENCH_PROFILE"])
    sys.exit(server.main(build_registry))
