"""Tools the benchmarks register next to the real ones (never part of the product).

- `noop`: returns at once (per-turn overhead).
- `sleep`: waits `seconds` with asyncio.sleep (abort mid-tool).
- `sleep_subprocess`: runs `sleep SECONDS` in a child process and kills it when cancelled
  (abort mid-tool, the way a tool with a sandbox or subprocess must behave).
"""

from __future__ import annotations

import asyncio

from langchain_core.tools import tool


@tool
async def noop() -> str:
    """Does nothing and returns at once."""
    return "ok"


@tool
async def sleep(seconds: float) -> str:
    """Waits the given number of seconds."""
    await asyncio.sleep(seconds)
    return f"slept {seconds} s"


@tool
async def sleep_subprocess(seconds: float) -> str:
    """Runs `sleep SECONDS` in a subprocess and waits for it."""
    proc = await asyncio.create_subprocess_exec("sleep", str(seconds))
    try:
        await proc.wait()
    except asyncio.CancelledError:
        proc.kill()
        await proc.wait()
        raise
    return f"slept {seconds} s in a subprocess"


BENCH_TOOLS = (noop, sleep, sleep_subprocess)
