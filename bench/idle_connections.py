"""Idle WebSocket connections: memory per socket and opening rate at 5,000 sockets against a
bare Starlette endpoint in the same run, `/health` against a bare endpoint, and memory per
socket on conversations of 100 turns.

Two servers run as child processes, served by uvicorn the same way, against the fake
Anthropic API (no model call is made): ours (`python server.py`) and the bare relay
(bench/bare_relay.py: accept, a `session` frame, a task that writes and a loop that reads,
nothing stored). For each, in rounds alternating which goes first: CONNECTIONS sockets opened
BATCH at a time, each reading its `session` frame, then held idle; the server's RSS (psutil)
before and after, over the number of sockets, and the sockets opened per second; then all
closed. Reported per round; the median over rounds is judged.

- memory: ours on new conversations (each client connects without `conversationId`, the
  server creates one, as for a new chat). Target ≤ 27 KiB per socket; bare shown beside it.
- opening rate: sockets (with their `session`) per second, ours / bare. Target ≥ 0.8.
- `/health`: HEALTH sequential GETs on one keep-alive connection, ours and bare
  interleaved; p50 ours / bare. Target ≤ 1.5 (ours answers with its configuration: what it
  reads must be ready, not looked up per call).
- 100 turns: LONG sockets (1,000), each on its own conversation of 100 finished turns (a user
  message and a reply with a web_search tool card, ~104k characters of visible and ~260k of
  model-facing history; see tests/seed.py), written into the SQLite file before the server
  starts (one through the store's ops, then copied row for row in SQL). Target ≤ 64 KiB each:
  what an open conversation keeps must not grow with it.

The ratio printed is the worst of KiB/27, (0.8 / opening ratio), health ratio / 1.5 and
KiB at 100 turns / 64. A socket that fails to open is counted; the server dropping idle
sockets fails the run.

File descriptors: the client needs one per socket, each server one per socket plus its own.
This script raises its soft RLIMIT_NOFILE (up to the hard limit) before starting the
servers, which inherit it; in production raise the server's with `ulimit -n` (or systemd's
`LimitNOFILE=`) to well above the number of sockets expected.

    python bench/idle_connections.py [--connections 5000] [--batch 100] [--rounds 2] [--long 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (BareRelay, ChatServer, Errors, FakeAnthropicProcess, load_note, median, ms,  # noqa: E402
                     open_session, pct, run, verdict)

import aiohttp  # noqa: E402
import psutil  # noqa: E402

from chat_agent.store import SqliteStore  # noqa: E402
from tests.seed import copy_conversation, seed_conversation  # noqa: E402

TARGET_KIB = 27.0
TARGET_LONG_KIB = 64.0
TARGET_OPENING = 0.8
TARGET_HEALTH = 1.5
OWNER = "local"  # the one user when auth is off


async def seed(db: Path, count: int, turns: int) -> None:
    """`count` conversations `c0`... of `turns` turns: the first written with the store's ops,
    the others copied from it in SQL (the same rows under another conversation id)."""
    async with SqliteStore(db) as store:
        await seed_conversation(store, OWNER, "c0", turns, created_at=time.time() - 86_400)
    with sqlite3.connect(db) as conn:
        for n in range(1, count):
            copy_conversation(conn, "c0", f"c{n}", later=n)


async def open_many(urls: list[str], batch: int, errors: Errors) -> list:
    """Opens them `batch` at a time; one that fails is counted, not retried."""
    sockets: list = []
    for start in range(0, len(urls), batch):
        chunk = urls[start:start + batch]
        sockets += errors.keep(await asyncio.gather(*(open_session(url, 60) for url in chunk), return_exceptions=True),
                               "open")
    return sockets


async def close_all(sockets: list) -> None:
    for start in range(0, len(sockets), 500):
        await asyncio.gather(*(ws.close() for ws in sockets[start:start + 500]), return_exceptions=True)


async def settle(proc: psutil.Process, seconds: float = 1.0) -> int:
    """RSS once the server has gone quiet (its writer committed, its buffers freed)."""
    await asyncio.sleep(seconds)
    return proc.memory_info().rss


async def measure(pid: int, label: str, warm: list[str], urls: list[str], batch: int) -> dict | None:
    """KiB of server RSS per idle socket on `urls` and sockets opened per second (None when
    the server dropped some)."""
    proc = psutil.Process(pid)
    errors = Errors()
    # warm-up: let the server import and allocate what any first connections need
    await close_all(await open_many(warm, batch, errors))
    gc.collect()
    before = await settle(proc)
    t0 = time.perf_counter()
    sockets = await open_many(urls, batch, errors)
    opened = time.perf_counter() - t0
    after = await settle(proc, 2.0)
    fds = proc.num_fds()
    still_open = sum(1 for ws in sockets if ws.state.name == "OPEN")
    per = (after - before) / max(1, len(sockets)) / 1024
    print(f"    {label}: opened {len(sockets)} in {opened:.2f} s ({len(sockets) / opened:.0f}/s); "
          f"RSS {before / 2**20:.1f} -> {after / 2**20:.1f} MiB = {per:.1f} KiB per socket; {still_open} still open "
          f"after settling, server holds {fds} fds; {errors.report(len(urls))}", flush=True)
    await close_all(sockets)
    await settle(proc, 1.0)
    if still_open != len(sockets) or not sockets:
        print(f"FAIL: {label}: the server dropped idle connections")
        return None
    return {"kib": per, "rate": len(sockets) / opened}


async def health(urls: dict[str, str], count: int) -> dict[str, list[float]]:
    """`count` GETs of each URL on one keep-alive connection each, interleaved."""
    times: dict[str, list[float]] = {name: [] for name in urls}
    async with aiohttp.ClientSession() as http:
        for i in range(count + 20):
            for name, url in urls.items():
                t0 = time.perf_counter()
                async with http.get(url) as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"{url}: {response.status}")
                if i >= 20:  # the first ones open the connections and warm up
                    times[name].append(time.perf_counter() - t0)
    return times


async def main_async(args: argparse.Namespace) -> bool:
    fake = FakeAnthropicProcess()
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        server = bare = None
        try:
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            print(f"idle connections: {args.connections} sockets in batches of {args.batch}, {args.rounds} rounds "
                  f"(fresh servers each: freed memory is not given back to the system); fd limit {soft} (hard "
                  f"{hard}, inherited by the servers); {load_note()}")
            if soft < args.connections + args.warmup + 100:
                raise SystemExit(f"fd limit too low for {args.connections} sockets: raise `ulimit -n`")
            rounds: list[dict[str, dict]] = []
            for r in range(args.rounds):
                server = ChatServer(fake, Path(tmp) / f"empty-{r}")
                bare = BareRelay(fake, Path(tmp) / f"bare-{r}.log")
                servers = {"ours": server, "bare": bare}
                order = ("bare", "ours") if r % 2 == 0 else ("ours", "bare")
                print(f"  round {r + 1}:")
                got = {}
                for name in order:
                    url = servers[name].ws_url
                    got[name] = await measure(servers[name].pid, name, [url] * args.warmup, [url] * args.connections,
                                              args.batch)
                    if got[name] is None:
                        return False
                rounds.append(got)
                if r < args.rounds - 1:
                    server.stop()
                    bare.stop()
            kib = median([g["ours"]["kib"] for g in rounds])
            kib_bare = median([g["bare"]["kib"] for g in rounds])
            opening = median([g["ours"]["rate"] / g["bare"]["rate"] for g in rounds])
            each = ", ".join(f"{g['ours']['rate'] / g['bare']['rate']:.2f}" for g in rounds)
            print(f"  opening ours/bare per round: {each}")
            times = await health({"ours": f"http://127.0.0.1:{server.port}/health",
                                  "bare": f"http://127.0.0.1:{bare.port}/health"}, args.health)
            for name, values in times.items():
                print(f"  /health {name}: p50 {ms(median(values))}  p90 {ms(pct(values, 90))}  n={len(values)}")
            health_ratio = median(times["ours"]) / median(times["bare"])
            server.stop()
            bare.stop()

            long = None
            if args.long:
                data = Path(tmp) / "long"
                data.mkdir()
                t0 = time.perf_counter()
                await seed(data / "chat-agent.db", args.warmup + args.long, args.turns)
                size = (data / "chat-agent.db").stat().st_size
                print(f"  seeded {args.warmup + args.long} conversations of {args.turns} turns in "
                      f"{time.perf_counter() - t0:.1f} s ({size / 2**20:.0f} MiB of SQLite)")
                server = ChatServer(fake, data)
                urls = [f"{server.ws_url}?conversationId=c{n}" for n in range(args.warmup + args.long)]
                got = await measure(server.pid, f"ours, conversations of {args.turns} turns", urls[:args.warmup],
                                    urls[args.warmup:], args.batch)
                if got is None:
                    return False
                long = got["kib"]
            print(f"  medians over {args.rounds} rounds: ours {kib:.1f} KiB per socket (bare {kib_bare:.1f}), "
                  f"opening ours/bare {opening:.3f}; /health p50 ours/bare {health_ratio:.3f}"
                  + (f"; {args.turns} turns {long:.1f} KiB" if long is not None else "") + f"; {load_note()}")
            ok = verdict(f"  KiB per idle socket at {args.connections} / {TARGET_KIB:.0f}", kib / TARGET_KIB, 1.0,
                         higher_is_better=False)
            ok = verdict("  opening rate ours/bare", opening, TARGET_OPENING, higher_is_better=True) and ok
            ok = verdict("  /health p50 ours/bare", health_ratio, TARGET_HEALTH, higher_is_better=False) and ok
            worst = max(kib / TARGET_KIB, TARGET_OPENING / opening, health_ratio / TARGET_HEALTH)
            if long is not None:
                ok = verdict(f"  KiB per idle socket at {args.turns} turns / {TARGET_LONG_KIB:.0f}",
                             long / TARGET_LONG_KIB, 1.0, higher_is_better=False) and ok
                worst = max(worst, long / TARGET_LONG_KIB)
            return verdict("idle connections: worst of the four / its target", worst, 1.0,
                           higher_is_better=False) and ok
        finally:
            for child in (server, bare):
                if child is not None:
                    child.stop()
            fake.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both servers; medians judged")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--health", type=int, default=300, help="GETs of /health on each server")
    parser.add_argument("--long", type=int, default=1000, help="sockets on conversations of --turns turns (0: skip)")
    parser.add_argument("--turns", type=int, default=100, help="turns of each long conversation")
    args = parser.parse_args()
    return run(main_async, args, fds=max(65536, 4 * (args.connections + args.warmup)))


if __name__ == "__main__":
    sys.exit(main())
