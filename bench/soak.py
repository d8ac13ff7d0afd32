"""Soak: back-to-back one-tool turns for ten minutes, through the real server; whether a turn
costs more CPU, or takes longer, at the end than at the start.

The real server (bench/bench_server.py: `server.py` plus the `noop` tool, the only tool
offered) runs as a child process against the fake Anthropic API in its own process.
SESSIONS clients (20) each run turns back to back: `[[tool noop {}]] please`, the fake
answers with a tool_use, the tool returns at once, the fake answers with a short text;
`message` → `done`. Each client moves to a new conversation every TURNS_PER_CONVERSATION
turns (20), so conversations are opened, filled and left all along, as in real use, while
each one's history stays small (history_scaling.py measures long histories).

After a warm-up (not counted), per minute: turns finished, turn p50/p99 (from sending the
message to `done`), the server's CPU per turn (psutil: its user + system time over the
minute / turns), its RSS, and errors (a turn that ends in an `error` frame, without its
tool, or times out is counted and the session goes on on a new conversation).

Verdict: last minute / first minute ≤ 1.3 for CPU per turn and for turn p50 (the ratio is
the worse of the two). Something that grows with the server's age (a cache, a list of
finished turns, a leak the collector walks) shows as a rising CPU per turn.

    python bench/soak.py [--minutes 10] [--sessions 20] [--warmup 20]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (ChatServer, Errors, FakeAnthropicProcess, load_note, median, ms, pct, proc_cpu,  # noqa: E402
                     recv_json, run, send_message, verdict, ws_connect)

import psutil  # noqa: E402

TARGET = 1.3
PROMPT = "[[tool noop {}]] please"


@dataclass
class Minute:
    turns: list[float] = field(default_factory=list)
    errors: Errors = field(default_factory=Errors)
    cpu: float = 0.0
    rss: int = 0


async def one_turn(ws: object) -> float:
    t0 = time.perf_counter()
    await ws.send(send_message(PROMPT))
    tool = False
    while True:
        frame = await recv_json(ws, 60)
        if frame["type"] == "tool_end":
            tool = True
        elif frame["type"] == "error":
            raise RuntimeError(f"error frame: {frame.get('code')}: {frame.get('message')}")
        elif frame["type"] == "done":
            break
    elapsed = time.perf_counter() - t0
    if frame.get("stopReason") != "end_turn" or not tool:
        raise RuntimeError(f"not a one-tool turn: tool_end seen {tool}, done {frame}")
    return elapsed


async def session(url: str, per_conversation: int, now: "Clock") -> None:
    """Turns until the clock stops (or cancelled), each recorded in the minute it ended in."""
    while not now.stopped:
        ws = None
        try:
            ws = await ws_connect(url)
            if (await recv_json(ws))["type"] != "session":
                raise RuntimeError("no session frame")
            for _ in range(per_conversation):
                if now.stopped:
                    return
                took = await one_turn(ws)
                if (minute := now.minute()) is not None:
                    minute.turns.append(took)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if (minute := now.minute()) is not None:
                minute.errors.add(exc)
            await asyncio.sleep(0.5)  # the next attempt on a new conversation, not a hot loop
        finally:
            if ws is not None:
                try:
                    await ws.close()
                except Exception:
                    pass


class Clock:
    """Which minute of the measured run it is (None during the warm-up)."""

    def __init__(self) -> None:
        self.minutes: list[Minute] = []
        self.stopped = False

    def minute(self) -> Minute | None:
        return self.minutes[-1] if self.minutes else None


async def main_async(args: argparse.Namespace) -> bool:
    fake = FakeAnthropicProcess()
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        server = None
        clock = Clock()
        tasks: list[asyncio.Task[None]] = []
        try:
            server = ChatServer(fake, Path(tmp) / "server", script="bench/bench_server.py",
                                env={"BENCH_TOOLS": "noop"})
            proc = psutil.Process(server.pid)
            print(f"soak: {args.sessions} sessions of back-to-back one-tool turns, a new conversation every "
                  f"{args.turns_per_conversation} turns; {args.warmup:.0f} s warm-up, then {args.minutes:g} minutes "
                  f"({load_note()})")
            tasks = [asyncio.create_task(session(server.ws_url, args.turns_per_conversation, clock))
                     for _ in range(args.sessions)]
            await asyncio.sleep(args.warmup)
            count = max(2, round(args.minutes))
            length = args.minutes * 60 / count
            for n in range(count):
                cpu0 = proc_cpu(server.pid)
                clock.minutes.append(Minute())
                await asyncio.sleep(length)
                minute = clock.minutes[-1]
                minute.cpu = proc_cpu(server.pid) - cpu0
                minute.rss = proc.memory_info().rss
                report(n + 1, minute, length)
                if not server.alive():
                    raise RuntimeError(f"the server died:\n{server.log()}")
            clock.minutes.append(Minute())  # turns ending while the sessions stop count nowhere
        finally:
            clock.stopped = True
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if server is not None:
                server.stop()
            fake.stop()
    first, last = clock.minutes[0], clock.minutes[-2]
    if not first.turns or not last.turns:
        print("FAIL: a minute without a finished turn")
        return False
    cpu_ratio = (last.cpu / len(last.turns)) / (first.cpu / len(first.turns))
    p50_ratio = median(last.turns) / median(first.turns)
    errors = sum(len(m.errors) for m in clock.minutes)
    print(f"  last / first minute: CPU per turn {cpu_ratio:.3f}, turn p50 {p50_ratio:.3f}; RSS "
          f"{first.rss / 2**20:.0f} -> {last.rss / 2**20:.0f} MiB; {errors} errors in all; now {load_note()}")
    ok = verdict("soak: server CPU per turn, last minute / first", cpu_ratio, TARGET, higher_is_better=False)
    return verdict("soak: turn p50, last minute / first", p50_ratio, TARGET, higher_is_better=False) and ok


def report(n: int, minute: Minute, length: float) -> None:
    turns = minute.turns
    if not turns:
        print(f"  minute {n}: no turn finished; {minute.errors.report()}")
        return
    print(f"  minute {n}: {len(turns)} turns ({len(turns) / length:.1f}/s), p50 {ms(median(turns))}, p99 "
          f"{ms(pct(turns, 99))}; server CPU {minute.cpu:.1f} s = {ms(minute.cpu / len(turns))} per turn; RSS "
          f"{minute.rss / 2**20:.0f} MiB; {minute.errors.report()}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="measured minutes (at least 2 buckets)")
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--turns-per-conversation", type=int, default=20)
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds before the first minute")
    args = parser.parse_args()
    if args.minutes < 10:
        print(f"(--minutes {args.minutes:g}: shorter than the 10 minutes the target is set for)")
    return run(main_async, args, fds=65536)


if __name__ == "__main__":
    sys.exit(main())
