"""Overload: SESSIONS streaming sessions on one SQLite instance while the machine is loaded
(stress-ng) to a load average of at least 10 (issue 21): does the instance keep its own leases?

DESIGN: "a busy instance renews leases ahead of bulk work, so overload alone never expires its
own leases". Measured here, on the real server (`python server.py`, SQLite) and the fake
Anthropic API in its own process:

- lease headroom: every 0.25 s this process reads the leases table (read-only, beside the
  server, as an operator would) and takes the least time left on any lease the instance holds;
  at or below 0 a lease expired while its instance was alive and busy. Reported: the least
  headroom seen, as a share of the lease time, and how many samples found an expired lease;
- what the server said: log lines of a lease lost, a take-over, a slow commit;
- every turn's end: each session's `done` must say `end_turn` (none `aborted` or `error`,
  none without a model call), and the store must hold every turn `complete`;
- ping: an idle socket pings every second; the time to its pong (answering pings, too, goes
  ahead of bulk work).

stress-ng runs in a process group of its own, ended by its id whatever happens (as are the
server and the fake).

    python bench/overload_leases.py [--sessions 1000] [--seconds 40] [--stress 12] [--lease 10]

Exit status 0 when no lease expired, no lease was lost and every turn ended `end_turn`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ChatServer, Child, FakeAnthropicProcess, pct, recv_json, run, ws_connect  # noqa: E402

SAMPLE_EVERY = 0.25
WORDS_PER_EVENT = 6.7  # the fake's long reply: ~40 characters (chunk_size) per SSE event
SLOW_EVENTS = 46  # the fake's `[[slow S]]` spreads S seconds over this many events


def message(seconds: float, words: int) -> str:
    """A long reply of `words` words streamed over about `seconds` s by the fake."""
    events = words / WORDS_PER_EVENT
    return f"[[long {words}]] [[slow {seconds * SLOW_EVENTS / events:.2f}]]"


def headroom(db: Path) -> tuple[float | None, int]:
    """The least time left on a held lease (s), and how many held leases have expired."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
        now = time.time()
        row = conn.execute("SELECT min(expires_at), sum(expires_at <= ?) FROM leases WHERE instance <> ''",
                           (now,)).fetchone()
    return (None if row[0] is None else row[0] - now), int(row[1] or 0)


async def pinger(url: str, stop: asyncio.Event, waits: list[float]) -> None:
    ws = await ws_connect(url)
    await recv_json(ws)
    try:
        while not stop.is_set():
            sent = time.perf_counter()
            await ws.send(json.dumps({"type": "ping"}))
            while (await recv_json(ws, 60))["type"] != "pong":
                pass
            waits.append(time.perf_counter() - sent)
            await asyncio.sleep(1)
    finally:
        await ws.close()


async def session(url: str, content: str, started: asyncio.Event) -> str:
    """One socket, one turn: its stopReason (or what failed)."""
    ws = await ws_connect(url)
    try:
        await recv_json(ws, 120)
        await started.wait()
        await ws.send(json.dumps({"type": "message", "content": content}))
        while True:
            frame = await recv_json(ws, 300)
            if frame["type"] == "done":
                return frame["stopReason"]
    except Exception as exc:
        return f"failed: {type(exc).__name__}"
    finally:
        await ws.close()


async def main(args: argparse.Namespace) -> bool:
    base = Path(tempfile.mkdtemp(prefix="overload-leases-"))
    fake = FakeAnthropicProcess()
    stress: Child | None = None
    server: ChatServer | None = None
    try:
        server = ChatServer(fake, base / "data", env={"CHAT_AGENT_LEASE_SECONDS": str(args.lease),
                                                      "CHAT_AGENT_LOG_LEVEL": "WARNING"})
        db = base / "data" / "chat-agent.db"
        if args.stress:
            stress = Child(["stress-ng", "--cpu", str(args.stress), "--timeout", f"{int(args.seconds * 4 + 120)}s"],
                           log=base / "stress.log")
        started = asyncio.Event()
        content = message(args.seconds, args.words)
        print(f"{args.sessions} sessions, each a reply of {args.words} words over ~{args.seconds:.0f} s; "
              f"lease {args.lease:.0f} s; stress-ng --cpu {args.stress}")
        tasks = []
        for i in range(args.sessions):  # opened in steps, as users arrive
            tasks.append(asyncio.ensure_future(session(server.ws_url, content, started)))
            if i % 50 == 49:
                await asyncio.sleep(0.2)
        stop = asyncio.Event()
        pongs: list[float] = []
        ping = asyncio.ensure_future(pinger(server.ws_url, stop, pongs))
        await asyncio.sleep(2)
        started.set()
        t0 = time.monotonic()
        least, expired_samples, expired_max, loads = float("inf"), 0, 0, []
        while not all(t.done() for t in tasks):
            left, expired = headroom(db)
            if left is not None:
                least = min(least, left)
            expired_samples += expired > 0
            expired_max = max(expired_max, expired)
            loads.append(os.getloadavg()[0])
            await asyncio.sleep(SAMPLE_EVERY)
        took = time.monotonic() - t0
        stops = [t.result() for t in tasks]
        stop.set()
        await asyncio.gather(ping, return_exceptions=True)
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            turns = dict(conn.execute("SELECT status || '/' || coalesce(stop_reason, '-'), count(*) FROM turns"
                                      " GROUP BY 1").fetchall())
    finally:
        if stress is not None:
            stress.stop()
        if server is not None:
            server.stop(60)
        fake.stop()
    log = (base / "data" / "server.log").read_text(errors="replace")
    said = {name: len(re.findall(pattern, log)) for name, pattern in (
        ("lease lost", r"lost the lease"), ("took over", r"took over"), ("slow commits", r"a store commit of"),
        ("errors", r" ERROR "))}
    ends: dict[str, int] = {}
    for reason in stops:
        ends[reason] = ends.get(reason, 0) + 1
    print(f"ran {took:.0f} s; load average: max {max(loads):.1f}, median {sorted(loads)[len(loads) // 2]:.1f}")
    print(f"lease headroom: least {least:.2f} s = {least / args.lease:.2f} of the lease; samples with a held lease "
          f"expired: {expired_samples} (at most {expired_max} at once)")
    print(f"sessions' done: {ends}; turns stored: {turns}")
    print(f"server log: {said}")
    if pongs:
        print(f"ping -> pong: p50 {pct(pongs, 50) * 1000:.0f} ms, p99 {pct(pongs, 99) * 1000:.0f} ms, "
              f"max {max(pongs) * 1000:.0f} ms ({len(pongs)} pings)")
    ok = (expired_samples == 0 and said["lease lost"] == 0 and said["took over"] == 0
          and ends == {"end_turn": args.sessions} and turns == {"complete/end_turn": args.sessions})
    print(f"\nno lease expired by its own instance, every turn end_turn -> {'PASS' if ok else 'FAIL'}")
    return ok


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=40.0, help="how long each reply streams")
    parser.add_argument("--words", type=int, default=600)
    parser.add_argument("--stress", type=int, default=12, help="stress-ng --cpu workers (0: none)")
    parser.add_argument("--lease", type=float, default=10.0, help="CHAT_AGENT_LEASE_SECONDS")
    sys.exit(run(main, parser.parse_args(), fds=65536))
