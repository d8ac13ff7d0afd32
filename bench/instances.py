"""Several instances: 100 streaming sessions over 2 instances on PostgreSQL against 100 on 1
instance on SQLite, cross-instance delivery and abort sent on another instance.

Every server is the real one (`python server.py`, a child process) against the fake
Anthropic API in its own process. The instances of one set-up share a fresh PostgreSQL
schema (127.0.0.1:5432, database `test`, dropped at the end) and one S3 bucket (moto's
server on loopback): what several instances need. Set-ups:

- sqlite: one instance, SQLite in its data directory (the reference);
- postgres: two instances, frames and commands between them over LISTEN/NOTIFY;
- redis: two instances, the bus over Redis (127.0.0.1:6379), reported apart; skipped with a
  note when Redis cannot be reached (or with `--no-redis`);
- pg-single: one instance on PostgreSQL (and S3), for reference only (throughput): what the
  store costs, apart from the second instance and the bus (`--no-single-pg` skips it).

All instances run on this machine's cores at once (with the fake, PostgreSQL and this
client), so two instances cannot double the throughput here; what is judged is that the
shared store and the bus cost little. Ratios are measured in one run.

1. Throughput (relay.py's method, `_common.drive`): SESSIONS sockets, each on a new
   conversation, spread round robin over the set-up's instances; a warm-up turn each (and
   its title), then one timed turn each, all at once, `[[long WORDS]]` from the fake, in a
   burst and paced (`--paced-ms` between SSE events). Judged against sqlite, per upstream
   mode: frames/s ≥ 0.8×, and first-text p50 (sending to the first `content_chunk`) ≤ 1.3×.
   Frames/s stays near sessions × 20 (the server merges each ~50 ms of deltas into a frame)
   whatever the speed, so reply text per second is judged as well (≥ 0.8×); both set-ups
   must deliver the same text.
2. Cross-instance delivery (two-instance set-ups), while BACKGROUND sessions spread over
   both instances stream without pause (abort_latency.py's background): WATCH
   conversations, each with a client on A that sends the messages (the turn runs on A) and
   a client on B that follows it; for every frame both receive (same `seq`), the time from
   A's client receiving it (about when A committed it: A sends a frame to its own sockets
   after its commit) to B's client receiving it. Both clients live in this process: one
   clock. Target p99 ≤ 50 ms. B must receive every frame A's client did.
3. Abort sent on B, same background: a turn started by a client on A streams slowly
   (abort_latency.py's slow-stream and steady-stream), a client on B waits for its first
   `content_chunk`, 0-50 ms more, sends `abort`; time until B receives `done` (stopReason
   `aborted`; A's client gets the same `done`). Target p99 ≤ 150 ms. A ping on an idle
   socket of B is timed meanwhile, for reference.

At the end each server's log is searched for warnings and errors, which are printed.
Ratios: frames/s and text/s sqlite-relative (higher is better), first-text p50 ratio,
delivery p99 / 50 ms, abort p99 / 150 ms. Exit status 0 when every verdict passes.

    python bench/instances.py [--quick] [--sessions 100] [--words 1000] [--no-redis]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import json
import os
import random
import re
import secrets
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (ROOT, ChatServer, FakeAnthropicProcess, drive, median, ms, pct, recv_json,  # noqa: E402
                     run, send_message, verdict, ws_connect)
from abort_latency import BACKGROUND, CASES, ping_forever, stream_forever  # noqa: E402

import psutil  # noqa: E402

FRAMES_RATIO, FIRST_RATIO = 0.8, 1.3
DELIVERY_S, ABORT_S = 0.050, 0.150
EVENTS_PER_SLOW = 46  # the fake spreads `[[slow S]]` over this many event gaps (tests/fakes)
WATCH = "[[long 300]] [[slow 2]]"  # ~2,700 characters, one SSE event every ~43 ms: ~3 s a turn
ABORT_CASES = {name: CASES[name] for name in ("slow-stream", "steady-stream")}
PG_HOST, PG_PORT, PG_DATABASE = "127.0.0.1", 5432, "test"
REDIS_URL = "redis://127.0.0.1:6379/0"
# What a server's log says when something went wrong (the server logs at WARNING and above).
TROUBLE = re.compile(r"WARNING|ERROR|CRITICAL|Traceback|Exception")


# ---- services -------------------------------------------------------------------------------

def pg_base_url() -> str:
    """The URL of the test database as the first user that connects (trust auth)."""
    import psycopg

    errors = []
    for user in dict.fromkeys(("postgres", getpass.getuser())):
        url = f"postgresql://{user}@{PG_HOST}:{PG_PORT}/{PG_DATABASE}"
        try:
            with psycopg.connect(url, connect_timeout=3):
                return url
        except psycopg.Error as exc:
            errors.append(f"{user}: {' '.join(str(exc).split())}")
    raise RuntimeError(f"PostgreSQL at {PG_HOST}:{PG_PORT}/{PG_DATABASE} is unreachable: {'; '.join(errors)}")


@contextlib.contextmanager
def fresh_schema(base: str) -> Iterator[str]:
    """A new, empty schema; yields a URL whose connections work in it (libpq `options`), and
    drops it with everything in it afterwards (as tests/pg.py does)."""
    import psycopg

    schema = f"bench_{secrets.token_hex(6)}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{base}?options={quote(f'-csearch_path={schema}', safe='')}"
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def redis_reachable(url: str) -> str | None:
    """None when Redis answers, else why not."""
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=3).ping()
    except Exception as exc:
        return str(exc)
    return None


def service_cpu(names: tuple[str, ...]) -> float:
    """CPU seconds so far of every process on the machine with one of these names (the
    database's backends, say); processes that ended meanwhile drop out of the sum."""
    total = 0.0
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] in names:
            with contextlib.suppress(psutil.Error):
                t = proc.cpu_times()
                total += t.user + t.system
    return total


@dataclass
class Setup:
    name: str
    judged: bool = True  # False: printed for reference (where the time goes), not judged
    servers: list[ChatServer] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.name}×{len(self.servers)}"

    @property
    def urls(self) -> list[str]:
        return [s.ws_url for s in self.servers]

    @property
    def pids(self) -> list[int]:
        return [s.pid for s in self.servers]


def start_setups(stack: contextlib.ExitStack, fake: FakeAnthropicProcess, tmp: Path,
                 args: argparse.Namespace) -> list[Setup]:
    """The set-ups, every process and schema registered on `stack` for cleanup."""
    from tests.fakes.s3_server import MotoS3

    def server(setup: Setup, env: dict[str, str] | None = None) -> None:
        index = len(setup.servers)
        instance = f"{setup.name}-{'ab'[index] if index < 2 else index}"
        chat = ChatServer(fake, tmp / instance, env={"CHAT_AGENT_INSTANCE_ID": instance, **(env or {})})
        stack.callback(chat.stop)
        setup.servers.append(chat)

    sqlite = Setup("sqlite")
    server(sqlite)
    setups = [sqlite]
    variants = ["postgres"]
    if not args.no_redis:
        why = redis_reachable(REDIS_URL)
        if why is None:
            variants.append("redis")
        else:
            print(f"(redis variant skipped: {REDIS_URL} is unreachable: {why})")
    if args.single_pg:
        variants.append("pg-single")
    base = pg_base_url()
    moto = MotoS3(tmp)
    stack.callback(moto.__exit__)  # before starting it: an interrupted start stops it too
    moto.__enter__()
    for name in variants:
        count = 1 if name == "pg-single" else 2
        bucket = f"bench-{uuid.uuid4().hex[:12]}"
        moto.create_bucket(bucket)
        env = {"CHAT_AGENT_DATABASE_URL": stack.enter_context(fresh_schema(base)), **moto.env,
               "CHAT_AGENT_S3_BUCKET": bucket, "CHAT_AGENT_S3_ENDPOINT_URL": moto.endpoint_url}
        if name == "redis":
            env["CHAT_AGENT_REDIS_URL"] = REDIS_URL
        setup = Setup(name, judged=count == 2)
        for _ in range(count):  # one after the other: the first one migrates the fresh schema
            server(setup, env)
        setups.append(setup)
    return setups


def scan_logs(tmp: Path, limit: int = 8) -> None:
    """Prints what the servers' logs hold beyond normal operation."""
    print("\nserver logs (warnings and errors):")
    for log in sorted(tmp.glob("*/server.log")):
        lines = [line for line in log.read_text(errors="replace").splitlines() if TROUBLE.search(line)]
        print(f"  {log.parent.name}: {len(lines)} line(s)" + (":" if lines else ""))
        seen: dict[str, int] = {}
        for line in lines:
            key = re.sub(r"[0-9a-f]{12,}|\d+(\.\d+)?", "#", line)  # same message, other ids and numbers
            seen[key] = seen.get(key, 0) + 1
            if seen[key] == 1 and len(seen) <= limit:
                print(f"    {line[:240]}")
        if len(seen) > limit:
            print(f"    ... and {len(seen) - limit} other kinds")
        repeated = {k: n for k, n in seen.items() if n > 1}
        for key, n in list(repeated.items())[:limit]:
            print(f"    (x{n}) {key[:160]}")


# ---- 1. throughput ----------------------------------------------------------------------------

def report_load(name: str, r: dict, db_cpu: float) -> None:
    print(f"    {name:8s} {r['frames_per_s']:7.0f} frames/s ({r['frames']} frames), "
          f"{r['throughput'] / 1000:6.1f} k chars/s, {r['elapsed']:.2f} s; first text {r['first'] * 1000:5.0f} ms, "
          f"half text {r['half'] * 1000:5.0f} ms; CPU servers {r['server_cpu']:.1f} s, fake {r['fake_cpu']:.1f} s, "
          f"client {r['client_cpu']:.1f} s, postgres+redis (machine) {db_cpu:.1f} s")


async def throughput(setups: list[Setup], fake: FakeAnthropicProcess, args: argparse.Namespace) -> dict:
    """{(mode, set-up name): drive() result}, set-ups in alternating order per mode."""
    results: dict[tuple[str, str], dict] = {}
    content = f"[[long {args.words}]]"
    for i, mode in enumerate(args.modes):
        text = content + (f" [[slow {args.paced_ms / 1000 * EVENTS_PER_SLOW:g}]]" if mode == "paced" else "")
        print(f"  {args.sessions} sessions, {mode} upstream, {text}:")
        for setup in (setups if i % 2 == 0 else setups[::-1]):  # alternate, so drift hits every one
            db0 = service_cpu(("postgres", "redis-server"))
            r = await drive(setup.urls, setup.pids, fake.pid, args.sessions, text, titled=True)
            results[mode, setup.name] = r
            report_load(setup.label, r, service_cpu(("postgres", "redis-server")) - db0)
    return results


def judge_throughput(results: dict, setups: list[Setup], modes: list[str]) -> bool:
    ok = True
    for mode in modes:
        ref = results[mode, "sqlite"]
        for setup in setups[1:]:
            r = results[mode, setup.name]
            label = f"  {mode}, {setup.label} vs sqlite×1"
            if not setup.judged:
                print(f"{label} (for reference, not judged): frames/s {r['frames_per_s'] / ref['frames_per_s']:.3f}, "
                      f"reply text/s {r['throughput'] / ref['throughput']:.3f}, "
                      f"first-text p50 {r['first'] / ref['first']:.3f}")
                continue
            if r["per_session"] != ref["per_session"] or len(ref["per_session"]) != 1:
                print(f"{label}: MISMATCH: reply characters per session {r['per_session']} vs {ref['per_session']}")
                ok = False
                continue
            ok = verdict(f"{label}: frames/s", r["frames_per_s"] / ref["frames_per_s"], FRAMES_RATIO,
                         higher_is_better=True) and ok
            ok = verdict(f"{label}: reply text/s", r["throughput"] / ref["throughput"], FRAMES_RATIO,
                         higher_is_better=True) and ok
            ok = verdict(f"{label}: first-text p50 ({ms(r['first'])} vs {ms(ref['first'])})",
                         r["first"] / ref["first"], FIRST_RATIO, higher_is_better=False) and ok
    return ok


# ---- 2. and 3. across instances -----------------------------------------------------------------

async def open_socket(url: str, conversation_id: str | None = None) -> tuple[Any, dict]:
    ws = await ws_connect(url + (f"?conversationId={conversation_id}" if conversation_id else ""))
    session = await recv_json(ws)
    if session.get("type") != "session":
        await ws.close()
        raise RuntimeError(f"expected a session frame, got {session}")
    return ws, session


async def read_until_done(ws: Any, arrivals: dict[int, float] | None = None, timeout: float = 60) -> dict:
    """Frames up to `done` (returned); the arrival time of each seq into `arrivals`."""
    while True:
        raw = await asyncio.wait_for(ws.recv(), timeout)
        now = time.perf_counter()
        frame = json.loads(raw)
        if arrivals is not None and "seq" in frame:
            arrivals.setdefault(frame["seq"], now)
        if frame["type"] == "error":
            raise RuntimeError(f"server error frame: {frame}")
        if frame["type"] == "done":
            return frame


@dataclass
class Delivery:
    latencies: list[float] = field(default_factory=list)
    missing: int = 0  # frames A's client got and B's did not
    turns: int = 0


async def watch(a: str, b: str, turns: int, into: Delivery) -> None:
    """A conversation whose turns run on A (its client sends them), followed by a client on B."""
    ws_a, session = await open_socket(a)
    ws_b = None
    try:
        ws_b, _ = await open_socket(b, session["conversationId"])
        for _ in range(turns):
            on_a: dict[int, float] = {}
            on_b: dict[int, float] = {}
            await ws_a.send(send_message(WATCH))
            done_a, done_b = await asyncio.gather(read_until_done(ws_a, on_a), read_until_done(ws_b, on_b))
            if done_a["seq"] != done_b["seq"] or done_a["stopReason"] != "end_turn":
                raise RuntimeError(f"A ended with {done_a}, B with {done_b}")
            into.latencies += [on_b[seq] - at for seq, at in on_a.items() if seq in on_b]
            into.missing += len(on_a.keys() - on_b.keys())
            into.turns += 1
    finally:
        for ws in (ws_a, ws_b):
            if ws is not None:
                await ws.close()


async def abort_on_b(a: str, b: str, case: str, rng: random.Random) -> float:
    """A turn started on A, aborted by a client on B: seconds from sending `abort` on B to
    B's `done`."""
    prompt, trigger = ABORT_CASES[case]
    ws_a, session = await open_socket(a)
    ws_b = None
    try:
        ws_b, _ = await open_socket(b, session["conversationId"])
        await ws_a.send(send_message(prompt))
        while True:
            frame = await recv_json(ws_b)
            if frame["type"] == trigger:
                break
            if frame["type"] in ("done", "error"):
                raise RuntimeError(f"{case}: turn ended before the abort: {frame}")
        await asyncio.sleep(rng.uniform(0, 0.05))
        t0 = time.perf_counter()
        await ws_b.send(json.dumps({"type": "abort"}))
        done_b = await read_until_done(ws_b, timeout=10)
        latency = time.perf_counter() - t0
        if done_b["stopReason"] != "aborted":
            raise RuntimeError(f"{case}: done on B with stopReason {done_b['stopReason']!r}")
        done_a = await read_until_done(ws_a, timeout=10)
        if done_a["seq"] != done_b["seq"]:
            raise RuntimeError(f"{case}: A's done {done_a} is not B's {done_b}")
        return latency
    finally:
        for ws in (ws_a, ws_b):
            if ws is not None:
                await ws.close()


async def across(setup: Setup, args: argparse.Namespace) -> tuple[Delivery, dict[str, list[float]], list[float], int]:
    """Delivery and aborts across the set-up's two instances, under background streaming."""
    a, b = setup.urls[:2]
    counts: list[int] = []
    started = asyncio.Event()
    background = [asyncio.create_task(stream_forever(setup.urls[i % 2], counts, started, args.background))
                  for i in range(args.background)]
    pinger = None
    try:
        if background:
            await asyncio.wait_for(started.wait(), 60)
            await asyncio.sleep(1.0)  # every background stream under way
        delivery = Delivery()
        await asyncio.gather(*(watch(a, b, args.watch_turns, delivery) for _ in range(args.watch)))
        pings: list[float] = []
        pinger = asyncio.create_task(ping_forever(b, pings))
        jobs: asyncio.Queue[str] = asyncio.Queue()
        names = list(ABORT_CASES)
        for i in range(args.aborts):
            jobs.put_nowait(names[i % len(names)])
        aborts: dict[str, list[float]] = {name: [] for name in names}

        async def worker(seed: int) -> None:
            rng = random.Random(seed)
            while not jobs.empty():
                case = jobs.get_nowait()
                aborts[case].append(await abort_on_b(a, b, case, rng))

        for case in names:  # warm-up, one of each, not counted
            await abort_on_b(a, b, case, random.Random(0))
        await asyncio.gather(*(worker(seed) for seed in range(args.concurrency)))
        for task in background:
            if task.done() and task.exception() is not None:
                raise RuntimeError(f"a background session failed: {task.exception()!r}")
        return delivery, aborts, pings, sum(counts)
    finally:
        for task in [*background, *([pinger] if pinger else [])]:
            task.cancel()
        await asyncio.gather(*background, *([pinger] if pinger else []), return_exceptions=True)


def judge_across(setup: Setup, delivery: Delivery, aborts: dict[str, list[float]], pings: list[float],
                 background_turns: int, args: argparse.Namespace) -> bool:
    name = setup.label
    lat = delivery.latencies
    print(f"  {name}: while {args.background} sessions streamed {BACKGROUND} over both instances "
          f"({background_turns} background turns finished)")
    print(f"    delivery A -> B: {len(lat)} frames of {delivery.turns} turns ({args.watch} conversations, {WATCH}): "
          f"p50 {ms(median(lat))}  p90 {ms(pct(lat, 90))}  p99 {ms(pct(lat, 99))}  max {ms(max(lat))}  "
          f"min {ms(min(lat))}; missing on B: {delivery.missing}")
    everything = [t for values in aborts.values() for t in values]
    for case, values in aborts.items():
        print(f"    abort on B, {case:13s} n={len(values):3d}  p50 {ms(median(values))}  p90 {ms(pct(values, 90))}  "
              f"p99 {ms(pct(values, 99))}  max {ms(max(values))}")
    print(f"    abort on B, all           n={len(everything):3d}  p50 {ms(median(everything))}  "
          f"p99 {ms(pct(everything, 99))}")
    if pings:
        print(f"    for reference, a ping on B meanwhile: n={len(pings)}  p50 {ms(median(pings))}  "
              f"p99 {ms(pct(pings, 99))}  max {ms(max(pings))}")
    ok = delivery.missing == 0
    if not ok:
        print(f"  {name}: FAIL: {delivery.missing} frames never reached B")
    ok = verdict(f"  {name}: delivery p99 / {DELIVERY_S * 1000:.0f} ms", pct(lat, 99) / DELIVERY_S, 1.0,
                 higher_is_better=False) and ok
    return verdict(f"  {name}: abort on B p99 / {ABORT_S * 1000:.0f} ms", pct(everything, 99) / ABORT_S, 1.0,
                   higher_is_better=False) and ok


# ---- the run --------------------------------------------------------------------------------------

async def main_async(args: argparse.Namespace) -> bool:
    print(f"instances: {os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    ok = True
    with contextlib.ExitStack() as stack:
        if args.keep:
            tmp = Path(args.keep).resolve()
            tmp.mkdir(parents=True, exist_ok=True)
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-instances-")))
        stack.callback(scan_logs, tmp)  # runs after every server stopped, before the directory goes
        fake = FakeAnthropicProcess()
        stack.callback(fake.stop)
        setups = start_setups(stack, fake, tmp, args)
        print("  " + "; ".join(f"{s.label}: pids {' '.join(map(str, s.pids))}" for s in setups)
              + f"; fake pid {fake.pid}")
        started = time.perf_counter()
        print(f"\n1. throughput ({time.strftime('%H:%M:%S')})")
        results = await throughput(setups, fake, args)
        ok = judge_throughput(results, setups, args.modes) and ok
        print(f"\n2-3. across instances: delivery A -> B, abort sent on B ({time.strftime('%H:%M:%S')})")
        for setup in (s for s in setups[1:] if len(s.servers) == 2):
            print(f"  ({time.strftime('%H:%M:%S')})")
            delivery, aborts, pings, turns = await across(setup, args)
            ok = judge_across(setup, delivery, aborts, pings, turns, args) and ok
        print(f"\nmeasured in {time.perf_counter() - started:.0f} s; load average now "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    smoke = " (--quick: a smoke run, too small to judge the targets)" if args.quick else ""
    print(f"\ninstances{smoke}: {'PASS' if ok else 'FAIL'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small numbers, for a smoke run")
    parser.add_argument("--sessions", type=int, help="streaming sessions in the throughput runs (100)")
    parser.add_argument("--words", type=int, help="[[long WORDS]] per session in the throughput runs (1000)")
    parser.add_argument("--modes", type=lambda s: s.split(","), default=["burst", "paced"])
    parser.add_argument("--paced-ms", type=float, default=2.0, help="gap between SSE events when paced")
    parser.add_argument("--background", type=int, help="sessions streaming during delivery and aborts (50)")
    parser.add_argument("--watch", type=int, help="conversations followed across instances (10)")
    parser.add_argument("--watch-turns", type=int, help="turns each followed conversation runs (3)")
    parser.add_argument("--aborts", type=int, help="aborts sent on B (60)")
    parser.add_argument("--concurrency", type=int, help="aborts at a time (4)")
    parser.add_argument("--no-redis", action="store_true", help="skip the variant with the bus over Redis")
    parser.add_argument("--no-single-pg", dest="single_pg", action="store_false",
                        help="skip the reference run on one PostgreSQL instance")
    parser.add_argument("--keep", metavar="DIR", help="keep the servers' data and logs in DIR")
    args = parser.parse_args()
    defaults = (dict(sessions=10, words=200, background=6, watch=2, watch_turns=1, aborts=8, concurrency=2)
                if args.quick else
                dict(sessions=100, words=1000, background=50, watch=10, watch_turns=3, aborts=60, concurrency=4))
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    # SIGTERM ends the run as Ctrl-C does (KeyboardInterrupt, also while servers start up,
    # outside the event loop): every `finally` on the way stops what it started.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    return run(main_async, args, fds=65536)


if __name__ == "__main__":
    sys.exit(main())
