"""Abort latency: from sending `abort` to receiving `done`, through the real WebSocket.

The real server (bench/bench_server.py: `server.py` plus the benchmark tools) runs as a
child process against the fake Anthropic API in its own process. Each cycle opens a
connection (a new conversation), starts a turn, waits for the moment to abort, waits a
random 0-50 ms more, sends `abort` and times until `done` arrives. The cycles mix four cases:

- slow-stream: `[[slow 2]]`, a reply trickling one event every ~43 ms; abort after the
  first `content_chunk`;
- steady-stream: `[[long 3000]] [[slow 0.3]]`, ~27k characters in 40-character deltas, one
  event every ~6 ms (a fast model); abort after the first `content_chunk`;
- tool: `sleep` (asyncio.sleep 30 s); abort after `tool_start`;
- subprocess-tool: `sleep_subprocess` (`sleep 30` in a child process, killed on cancel);
  abort after `tool_start`.

Reported apart, not in the target mix: burst-stream, `[[long 3000]]` sent by the fake as
fast as it can (the whole reply is in the server's socket buffer at once), aborted 20-80 ms
after the message was sent, whatever has arrived by then. It shows how long the server
takes to notice an abort while it is busy relaying a burst; the turn may finish first.

All of it runs while BACKGROUND other sessions (default 50) stream replies without pause
(`[[long 1000]]` paced at one event every 20 ms, i.e. ~2,000 characters a second each, a
fast model): abort must not queue behind their frames.

Checked for every abort: `done` has stopReason `aborted`, a tool abort closed its card with
`tool_end` isError before `done`, and no `sleep` child process outlives the run.
Target: p99 ≤ 100 ms over all aborts; the ratio is p99 / 100 ms.

    python bench/abort_latency.py [--aborts 200] [--concurrency 4] [--background 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (ChatServer, FakeAnthropicProcess, median, ms, pct, recv_json,  # noqa: E402
                     send_message, run, verdict, ws_connect)

import psutil  # noqa: E402

TARGET_S = 0.100
BURST = "[[long 3000]]"
CASES = {
    "slow-stream": ("[[slow 2]]", "content_chunk"),
    "steady-stream": ("[[long 3000]] [[slow 0.3]]", "content_chunk"),  # 0.3 s / 46 = ~6.5 ms per event
    "tool": ('[[tool sleep {"seconds": 30}]]', "tool_start"),
    "subprocess-tool": ('[[tool sleep_subprocess {"seconds": 30}]]', "tool_start"),
}


async def one_abort(url: str, case: str, rng: random.Random) -> float:
    prompt, trigger = CASES[case]
    ws = await ws_connect(url)
    try:
        await recv_json(ws)  # session
        await ws.send(send_message(prompt))
        while True:
            frame = await recv_json(ws)
            if frame["type"] == trigger:
                break
            if frame["type"] in ("done", "error"):
                raise RuntimeError(f"{case}: turn ended before the abort: {frame}")
        await asyncio.sleep(rng.uniform(0, 0.05))
        t0 = time.perf_counter()
        await ws.send(json.dumps({"type": "abort"}))
        tool_closed = False
        while True:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 5))
            if frame["type"] == "tool_end" and frame.get("isError"):
                tool_closed = True
            if frame["type"] == "done":
                latency = time.perf_counter() - t0
                break
        if frame["stopReason"] != "aborted":
            raise RuntimeError(f"{case}: done with stopReason {frame['stopReason']!r}")
        if trigger == "tool_start" and not tool_closed:
            raise RuntimeError(f"{case}: no tool_end with isError before done")
        return latency
    finally:
        await ws.close()


async def burst_abort(url: str, rng: random.Random) -> tuple[float, str, int]:
    """Abort 20-80 ms into a burst; returns (latency, stopReason, chunks received before abort)."""
    ws = await ws_connect(url)
    try:
        await recv_json(ws)  # session
        await ws.send(send_message(BURST))
        await asyncio.sleep(rng.uniform(0.02, 0.08))
        t0 = time.perf_counter()
        await ws.send(json.dumps({"type": "abort"}))
        chunks = 0
        while True:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
            chunks += frame["type"] == "content_chunk"
            if frame["type"] == "done":
                return time.perf_counter() - t0, frame["stopReason"], chunks
    finally:
        await ws.close()


BACKGROUND = "[[long 1000]] [[slow 0.92]]"  # 0.92 s / 46 = 20 ms per event


async def stream_forever(url: str, counts: list[int], started: asyncio.Event, total: int) -> None:
    """One background session: a turn after another until cancelled; counts finished turns."""
    ws = await ws_connect(url)
    try:
        await recv_json(ws)  # session
        counts.append(0)
        if len(counts) == total:
            started.set()
        while True:
            await ws.send(send_message(BACKGROUND))
            while (await recv_json(ws, 120))["type"] != "done":
                pass
            counts[-1] += 1
    finally:
        await ws.close()


async def ping_forever(url: str, rtts: list[float]) -> None:
    """A ping every 50 ms on an idle session: how long the busy server takes to answer anything."""
    ws = await ws_connect(url)
    try:
        await recv_json(ws)  # session
        while True:
            t0 = time.perf_counter()
            await ws.send(json.dumps({"type": "ping"}))
            while (await recv_json(ws))["type"] != "pong":
                pass
            rtts.append(time.perf_counter() - t0)
            await asyncio.sleep(0.05)
    finally:
        await ws.close()


async def worker(url: str, jobs: asyncio.Queue, results: dict[str, list[float]], seed: int) -> None:
    rng = random.Random(seed)
    while True:
        try:
            case = jobs.get_nowait()
        except asyncio.QueueEmpty:
            return
        results[case].append(await one_abort(url, case, rng))


async def main_async(args: argparse.Namespace) -> bool:
    fake = FakeAnthropicProcess()
    with tempfile.TemporaryDirectory(prefix="bench-abort-") as tmp:
        server = None
        try:
            server = ChatServer(fake, Path(tmp) / "server", script="bench/bench_server.py")
            names = list(CASES)
            for case in names:  # warm-up, one of each
                await one_abort(server.ws_url, case, random.Random(0))
            counts: list[int] = []
            started = asyncio.Event()
            background = [asyncio.create_task(stream_forever(server.ws_url, counts, started, args.background))
                          for _ in range(args.background)]
            if background:
                await asyncio.wait_for(started.wait(), 60)
                await asyncio.sleep(1.0)  # every background stream under way
            pings: list[float] = []
            pinger = asyncio.create_task(ping_forever(server.ws_url, pings))
            jobs: asyncio.Queue = asyncio.Queue()
            for i in range(args.aborts):
                jobs.put_nowait(names[i % len(names)])
            results: dict[str, list[float]] = {case: [] for case in names}
            t0 = time.perf_counter()
            await asyncio.gather(*(worker(server.ws_url, jobs, results, seed) for seed in range(args.concurrency)))
            elapsed = time.perf_counter() - t0
            pinger.cancel()
            await asyncio.gather(pinger, return_exceptions=True)
            rng = random.Random(99)
            bursts = [await burst_abort(server.ws_url, rng) for _ in range(args.bursts)]
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await asyncio.sleep(0.5)
            leftovers = [p for p in psutil.Process(server.pid).children(recursive=True) if p.is_running()]
        finally:
            if server is not None:
                server.stop()
            fake.stop()
    everything = [t for values in results.values() for t in values]
    print(f"abort latency: {len(everything)} aborts, {args.concurrency} sessions at a time, in {elapsed:.1f} s "
          f"(send `abort` -> receive `done`, through the real server), while {args.background} other sessions "
          f"streamed {BACKGROUND} ({sum(counts)} background turns finished)")
    for case, values in results.items():
        print(f"  {case:16s} n={len(values):3d}  median {ms(median(values))}  p90 {ms(pct(values, 90))}  "
              f"p99 {ms(pct(values, 99))}  max {ms(max(values))}")
    p99 = pct(everything, 99)
    print(f"  all              n={len(everything):3d}  median {ms(median(everything))}  p90 {ms(pct(everything, 90))}  "
          f"p99 {ms(p99)}  max {ms(max(everything))}")
    print(f"  for reference, a ping meanwhile (no store, no turn): n={len(pings)}  median {ms(median(pings))}  "
          f"p99 {ms(pct(pings, 99))}  max {ms(max(pings))}")
    if bursts:
        lat = [b[0] for b in bursts]
        aborted = sum(b[1] == "aborted" for b in bursts)
        print(f"  not in the target mix: burst-stream ({BURST} all at once, abort 20-80 ms after sending), "
              f"n={len(bursts)}: median {ms(median(lat))}  p99 {ms(pct(lat, 99))}  max {ms(max(lat))}; "
              f"{aborted} stopped as aborted, {len(bursts) - aborted} had already finished")
    print(f"  child processes of the server left running: {len(leftovers)}")
    if leftovers:
        print("FAIL: a cancelled tool's subprocess outlived the abort")
        return False
    return verdict("abort p99 / 100 ms", p99 / TARGET_S, 1.0, higher_is_better=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aborts", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--background", type=int, default=50, help="sessions streaming meanwhile")
    parser.add_argument("--bursts", type=int, default=20, help="burst-stream aborts, reported apart (0: none)")
    args = parser.parse_args()
    return run(main_async, args, fds=65536)


if __name__ == "__main__":
    sys.exit(main())
