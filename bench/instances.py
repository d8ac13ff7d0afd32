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
2. Cross-instance delivery, while BACKGROUND sessions spread over the set-up's instances
   stream without pause (abort_latency.py's background): WATCH conversations, each with a
   client on A that sends the messages (the turn runs on A) and a client on B that follows
   it; for every frame both receive (same `seq`), the time from A's client receiving it
   (about when A committed it: A sends a frame to its own sockets after its commit) to B's
   client receiving it. Both clients live in this process: one clock. Target p99 ≤ 50 ms.
   B must receive every frame A's client did. Split, for where the time goes, at the moment
   the frame went by on the bus (BusTap: this process listening with the project's bus
   client as one more instance would): A's client -> bus (the owner's commit and publish),
   bus -> B's client (the follower).
3. Abort sent on B, same background: a turn started by a client on A streams slowly
   (abort_latency.py's slow-stream and steady-stream), a client on B waits for its first
   `content_chunk`, 0-50 ms more, sends `abort`; time until B receives `done` (stopReason
   `aborted`; A's client gets the same `done`). Target p99 ≤ 150 ms. Also shown: the time
   until A's client got `done` (forwarding and stopping, without the way back to B); aborts
   sent on A itself, the owner (`--local-aborts`, after the others); a ping on an idle socket
   of B meanwhile: how long the busy instance takes to answer anything.
2-3 run on sqlite×1 first (both clients on the one instance), as the reference under the
same load on the same machine, shown beside the others and not judged.

At the end each server's log is searched for warnings and errors, which are printed.
Ratios: frames/s and text/s sqlite-relative (higher is better), first-text p50 ratio,
delivery p99 / 50 ms, abort p99 / 150 ms. Exit status 0 when every verdict passes.
`--phases throughput` or `--phases across` runs one part alone (to profile it).

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
from _common import (ROOT, ChatServer, Errors, FakeAnthropicProcess, drive, judge_rounds, median, ms, pct,  # noqa: E402
                     proc_cpu, recv_json, run, send_message, settle, verdict, ws_connect)
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
    # Timeouts, so that a PostgreSQL out of connections (or a lock a dying server still holds)
    # ends the run with an error instead of a wait nothing interrupts.
    with psycopg.connect(base, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{base}?options={quote(f'-csearch_path={schema}', safe='')}"
    finally:
        try:
            with psycopg.connect(base, autocommit=True, connect_timeout=5) as conn:
                conn.execute("SET lock_timeout = '15s'")
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        except psycopg.Error as exc:
            print(f"  could not drop schema {schema}: {' '.join(str(exc).split())}")


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
    database_url: str | None = None  # PostgreSQL's, None for SQLite
    redis_url: str | None = None
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
        setup = Setup(name, judged=count == 2, database_url=env["CHAT_AGENT_DATABASE_URL"],
                      redis_url=env.get("CHAT_AGENT_REDIS_URL"))
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
    """One round: the timed turns' figures (CPU in their window), and the database's CPU over
    the whole round (opening, warm-up turns and titles too)."""
    print(f"    {name:8s} {r['frames_per_s']:7.0f} frames/s ({r['frames']} frames), "
          f"{r['throughput'] / 1000:6.1f} k chars/s, {r['elapsed']:.2f} s; first text {r['first'] * 1000:5.0f} ms, "
          f"half text {r['half'] * 1000:5.0f} ms; CPU servers {r['server_cpu']:.1f} s, fake {r['fake_cpu']:.1f} s, "
          f"client {r['client_cpu']:.1f} s, postgres+redis (machine) {r['services_cpu']:.1f} s "
          f"({db_cpu:.1f} s over the round); {r['errors'].report()}")


async def throughput(setups: list[Setup], fake: FakeAnthropicProcess, args: argparse.Namespace) -> dict:
    """{(mode, set-up name): [drive() result of each round]}, set-ups in alternating order."""
    results: dict[tuple[str, str], list[dict]] = {}
    content = f"[[long {args.words}]]"
    for i, mode in enumerate(args.modes):
        text = content + (f" [[slow {args.paced_ms / 1000 * EVENTS_PER_SLOW:g}]]" if mode == "paced" else "")
        print(f"  {args.sessions} sessions, {mode} upstream, {text}, {args.rounds} rounds:")
        for r in range(args.rounds):
            for setup in (setups if (i + r) % 2 == 0 else setups[::-1]):  # alternate, so drift hits every one
                await settle([pid for s in setups for pid in s.pids])
                db0 = service_cpu(("postgres", "redis-server"))
                try:
                    got = await drive(setup.urls, setup.pids, fake.pid, args.sessions, text, titled=True,
                                      service_cpu=lambda: service_cpu(("postgres", "redis-server")))
                except Exception as exc:  # every session failed (PostgreSQL out of connections, say)
                    print(f"    {setup.label} ({r + 1}): no turn finished: {' '.join(str(exc).split())[:300]}")
                    continue
                results.setdefault((mode, setup.name), []).append(got)
                report_load(f"{setup.label} ({r + 1})", got, service_cpu(("postgres", "redis-server")) - db0)
    return results


def judge_throughput(results: dict, setups: list[Setup], modes: list[str]) -> bool:
    """Per mode and set-up, each round's ratios against sqlite×1's same round; their median judged."""
    ok = True
    for mode in modes:
        refs = results.get((mode, "sqlite"), [])
        for setup in setups[1:]:
            rounds = []
            for r, ref in zip(results.get((mode, setup.name), []), refs):
                if r["per_session"] != ref["per_session"] or len(ref["per_session"]) != 1:
                    print(f"  {mode}, {setup.label}: MISMATCH: reply characters per session {r['per_session']} vs "
                          f"{ref['per_session']}")
                    ok = False
                    continue
                rounds.append({"frames": r["frames_per_s"] / ref["frames_per_s"],
                               "text": r["throughput"] / ref["throughput"], "first": r["first"] / ref["first"]})
            label = f"  {mode}, {setup.label} vs sqlite×1"
            if not setup.judged:
                if rounds:
                    print(f"{label} (for reference, not judged, medians): frames/s "
                          f"{median([x['frames'] for x in rounds]):.3f}, reply text/s "
                          f"{median([x['text'] for x in rounds]):.3f}, first-text p50 "
                          f"{median([x['first'] for x in rounds]):.3f}")
                continue
            ok = judge_rounds(rounds, label, (("frames", "frames/s", FRAMES_RATIO, True),
                                              ("text", "reply text/s", FRAMES_RATIO, True),
                                              ("first", "first-text p50", FIRST_RATIO, False))) and ok
    return ok


# ---- 2. and 3. across instances -----------------------------------------------------------------

async def open_socket(url: str, conversation_id: str | None = None) -> tuple[Any, dict]:
    ws = await ws_connect(url + (f"?conversationId={conversation_id}" if conversation_id else ""))
    session = await recv_json(ws)
    if session.get("type") != "session":
        await ws.close()
        raise RuntimeError(f"expected a session frame, got {session}")
    return ws, session


async def stored_conversation(url: str) -> tuple[Any, str]:
    """A socket on a new conversation after one short, untimed turn: a conversation is stored
    with its first message (PROTOCOL 1.2), and only then can another instance open it."""
    ws, session = await open_socket(url)
    try:
        await ws.send(send_message("[[long 5]]"))
        await read_until_done(ws)
    except BaseException:
        await ws.close()
        raise
    return ws, session["conversationId"]


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
    latencies: list[float] = field(default_factory=list)  # A's client -> B's client
    # Split at the moment the frame went by on the bus (see BusTap): A's client -> bus, bus -> B's client
    published: list[float] = field(default_factory=list)
    delivered: list[float] = field(default_factory=list)
    missing: int = 0  # frames A's client got and B's did not (after B's snapshot)
    turns: int = 0


class BusTap:
    """This process on the set-up's bus as one more instance would be (the project's own bus
    client, listening only): when each committed frame went by. It splits a delivery into
    the owner's side (commit, publish) and the follower's (receive, hand to its sockets)."""

    def __init__(self, database_url: str, redis_url: str | None):
        from chat_agent.sessions.bus import create_bus

        self.bus = create_bus(f"bench-tap-{secrets.token_hex(4)}", database_url, redis_url)
        self.seen: dict[tuple[str, int], float] = {}

    async def __aenter__(self) -> "BusTap":
        await self.bus.start()
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)
        await self.bus.close()

    async def _read(self) -> None:
        """What arrives in the bus's inbox (as an instance's serving loop reads it): frames."""
        from chat_agent.sessions.messages import Frames

        while True:
            message = await self.bus.inbox.get()
            if isinstance(message, Frames):
                self._frames(message.conversation, message.frames)

    def _frames(self, conversation_id: str, frames: list, instance: str = "") -> None:
        now = time.perf_counter()
        for seq, *_ in frames:
            self.seen.setdefault((conversation_id, seq), now)


async def watch(a: str, b: str, turns: int, into: Delivery, tap: BusTap | None) -> None:
    """A conversation whose turns run on A (its client sends them), followed by a client on B."""
    ws_a, cid = await stored_conversation(a)
    ws_b = None
    try:
        ws_b, session = await open_socket(b, cid)
        # B's snapshot holds everything up to its seq: a frame from before it (the title of the
        # stored first exchange, say, which A's client reads with the first timed turn) is not
        # sent to B again, and was never missing.
        snapshot = session.get("seq") or 0
        for _ in range(turns):
            on_a: dict[int, float] = {}
            on_b: dict[int, float] = {}
            await ws_a.send(send_message(WATCH))
            done_a, done_b = await asyncio.gather(read_until_done(ws_a, on_a), read_until_done(ws_b, on_b))
            if done_a["seq"] != done_b["seq"] or done_a["stopReason"] != "end_turn":
                raise RuntimeError(f"A ended with {done_a}, B with {done_b}")
            into.latencies += [on_b[seq] - at for seq, at in on_a.items() if seq in on_b]
            if tap is not None:
                both = [(at, tap.seen[cid, seq], on_b[seq]) for seq, at in on_a.items()
                        if seq in on_b and (cid, seq) in tap.seen]
                into.published += [bus - at for at, bus, _ in both]
                into.delivered += [at_b - bus for _, bus, at_b in both]
            into.missing += sum(1 for seq in on_a.keys() - on_b.keys() if seq > snapshot)
            into.turns += 1
    finally:
        for ws in (ws_a, ws_b):
            if ws is not None:
                await ws.close()


@dataclass
class Aborted:
    sender: float  # seconds from sending `abort` to `done` on the socket that sent it
    owner: float  # ... to `done` on A's socket (A runs the turn): forwarding and stopping, without delivery


async def abort_cycle(a: str, b: str, case: str, rng: random.Random, on: str = "B") -> Aborted:
    """A turn started by a client on A, followed by a client on B; `abort` sent on B (or, for
    reference, on A) once B got its first `content_chunk`, 0-50 ms later."""
    prompt, trigger = ABORT_CASES[case]
    ws_a, cid = await stored_conversation(a)
    ws_b = None
    try:
        ws_b, _ = await open_socket(b, cid)
        await ws_a.send(send_message(prompt))
        while True:
            frame = await recv_json(ws_b)
            if frame["type"] == trigger:
                break
            if frame["type"] in ("done", "error"):
                raise RuntimeError(f"{case}: turn ended before the abort: {frame}")
        await asyncio.sleep(rng.uniform(0, 0.05))
        t0 = time.perf_counter()
        await (ws_b if on == "B" else ws_a).send(json.dumps({"type": "abort"}))

        async def done(ws: Any) -> tuple[dict, float]:
            frame = await read_until_done(ws, timeout=10)
            return frame, time.perf_counter() - t0

        (done_a, at_a), (done_b, at_b) = await asyncio.gather(done(ws_a), done(ws_b))
        if done_b["stopReason"] != "aborted" or done_a["seq"] != done_b["seq"]:
            raise RuntimeError(f"{case}: done on A {done_a}, on B {done_b}")
        return Aborted(sender=at_b if on == "B" else at_a, owner=at_a)
    finally:
        for ws in (ws_a, ws_b):
            if ws is not None:
                await ws.close()


@dataclass
class Across:
    delivery: Delivery
    aborts: dict[str, list[Aborted]]  # sent on B, by case
    local: list[Aborted]  # sent on A, the owner: for reference
    pings: list[float]
    background_turns: int
    wall: float  # seconds measured (delivery and aborts, background running)
    cpu: dict[str, float]  # CPU seconds meanwhile: A, B, fake, client, postgres+redis


async def across(setup: Setup, fake: FakeAnthropicProcess, args: argparse.Namespace) -> Across:
    """Delivery and aborts across the set-up's two instances, under background streaming."""
    a, b = setup.urls[0], setup.urls[-1]  # one instance: both clients on it (the reference)
    counts: list[int] = []
    started = asyncio.Event()
    background = [asyncio.create_task(stream_forever(setup.urls[i % len(setup.urls)], counts, started, args.background))
                  for i in range(args.background)]
    pinger = None

    def cpu() -> dict[str, float]:
        servers = {"A": proc_cpu(setup.pids[0]), "B": proc_cpu(setup.pids[-1])} if len(setup.pids) == 2 else \
            {"server": proc_cpu(setup.pids[0])}
        return {**servers, "fake": proc_cpu(fake.pid),
                "client": time.process_time(), "postgres+redis": service_cpu(("postgres", "redis-server"))}

    try:
        if background:
            await asyncio.wait_for(started.wait(), 60)
            await asyncio.sleep(1.0)  # every background stream under way
        cpu0, t0 = cpu(), time.perf_counter()
        errors = Errors()
        delivery = Delivery()
        async with contextlib.AsyncExitStack() as taps:
            tap = await taps.enter_async_context(BusTap(setup.database_url, setup.redis_url)) \
                if setup.database_url else None
            watched = await asyncio.gather(*(watch(a, b, args.watch_turns, delivery, tap) for _ in range(args.watch)),
                                           return_exceptions=True)
            errors.keep(watched, "followed conversation")
        pings: list[float] = []
        pinger = asyncio.create_task(ping_forever(b, pings))
        jobs: asyncio.Queue[str] = asyncio.Queue()
        names = list(ABORT_CASES)
        for i in range(args.aborts):
            jobs.put_nowait(names[i % len(names)])
        aborts: dict[str, list[Aborted]] = {name: [] for name in names}
        local: list[Aborted] = []

        async def worker(seed: int) -> None:
            rng = random.Random(seed)
            while not jobs.empty():
                case = jobs.get_nowait()
                try:
                    if case.startswith("A:"):
                        local.append(await abort_cycle(a, b, case[2:], rng, on="A"))
                    else:
                        aborts[case].append(await abort_cycle(a, b, case, rng))
                except (Exception, asyncio.TimeoutError) as exc:
                    errors.add(exc, f"abort {case}")

        for case in names:  # warm-up, one of each, not counted
            await abort_cycle(a, b, case, random.Random(0))
        await asyncio.gather(*(worker(seed) for seed in range(args.concurrency)))
        for i in range(args.local_aborts):  # then the reference, under the same load
            jobs.put_nowait("A:" + names[i % len(names)])
        await asyncio.gather(*(worker(100 + seed) for seed in range(args.concurrency)))
        wall, cpu1 = time.perf_counter() - t0, cpu()
        for task in background:
            if task.done() and not task.cancelled() and task.exception() is not None:
                errors.add(task.exception(), "background session")
        if errors:
            print(f"    {errors.report()}")
        return Across(delivery, aborts, local, pings, sum(counts), wall, {k: cpu1[k] - cpu0[k] for k in cpu0})
    finally:
        for task in [*background, *([pinger] if pinger else [])]:
            task.cancel()
        await asyncio.gather(*background, *([pinger] if pinger else []), return_exceptions=True)
        await settle(setup.pids)  # the background turns run on to their end without their sockets


def judge_across(setup: Setup, r: Across, args: argparse.Namespace, ref: Across | None) -> bool:
    """Prints the figures; judges a two-instance set-up (`ref`: the single SQLite instance's,
    shown beside them), not the reference itself."""
    name = setup.label
    lat = r.delivery.latencies
    where = "both instances" if len(setup.servers) == 2 else "the instance (clients 'A' and 'B' both on it)"
    print(f"  {name}: while {args.background} sessions streamed {BACKGROUND} over {where} "
          f"({r.background_turns} background turns finished)")
    print(f"    delivery A -> B: {len(lat)} frames of {r.delivery.turns} turns ({args.watch} conversations, "
          f"{WATCH}): p50 {ms(median(lat))}  p90 {ms(pct(lat, 90))}  p99 {ms(pct(lat, 99))}  max {ms(max(lat))}  "
          f"min {ms(min(lat))}; missing on B: {r.delivery.missing}")
    for label, values in (("A's client -> on the bus", r.delivery.published),
                          ("on the bus -> B's client", r.delivery.delivered)):
        if values:
            print(f"      {label}: p50 {ms(median(values))}  p90 {ms(pct(values, 90))}  p99 {ms(pct(values, 99))}  "
                  f"max {ms(max(values))}")
    def line(label: str, values: list[float]) -> str:
        return (f"{label} n={len(values):3d}  p50 {ms(median(values))}  p90 {ms(pct(values, 90))}  "
                f"p99 {ms(pct(values, 99))}  max {ms(max(values))}")

    for case, values in r.aborts.items():
        print(line(f"    abort on B, {case:13s}", [x.sender for x in values]))
    sent_on_b = [x for values in r.aborts.values() for x in values]
    everything = [x.sender for x in sent_on_b]
    print(line("    abort on B, all          ", everything))
    print(line("      of which, until done on A (the owner: forwarded and stopped, not yet delivered to B)",
               [x.owner for x in sent_on_b]))
    if r.local:
        print(line("    for reference, abort sent on A (the owner), done on A", [x.owner for x in r.local]))
    if r.pings:
        print(f"    for reference, a ping on B meanwhile: n={len(r.pings)}  p50 {ms(median(r.pings))}  "
              f"p99 {ms(pct(r.pings, 99))}  max {ms(max(r.pings))}")
    print(f"    CPU over the {r.wall:.1f} s measured: " + ", ".join(f"{k} {v:.1f} s ({v / r.wall:.0%})"
                                                               for k, v in r.cpu.items()))
    if ref is not None:
        p99_ref = pct([x.sender for values in ref.aborts.values() for x in values], 99)
        print(f"    beside sqlite×1 under the same load: abort p99 {pct(everything, 99) / p99_ref:.2f}×, ping on B p50 "
              f"{median(r.pings) / median(ref.pings):.2f}×")
    ok = r.delivery.missing == 0
    if len(setup.servers) == 1:
        print(f"  {name}: the reference (both clients on the one instance), not judged")
        return ok
    if not ok:
        print(f"  {name}: FAIL: {r.delivery.missing} frames never reached B")
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
        if "throughput" in args.phases:
            print(f"\n1. throughput ({time.strftime('%H:%M:%S')})")
            results = await throughput(setups, fake, args)
            ok = judge_throughput(results, setups, args.modes) and ok
        if "across" in args.phases:
            print("\n2-3. across instances: delivery A -> B, abort sent on B")
            ref = None
            for setup in (s for s in setups if s.judged):  # sqlite×1 first: the reference
                print(f"  ({time.strftime('%H:%M:%S')})")
                r = await across(setup, fake, args)
                ok = judge_across(setup, r, args, ref) and ok
                ref = ref or r
        print(f"\nmeasured in {time.perf_counter() - started:.0f} s; load average now "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    smoke = " (--quick: a smoke run, too small to judge the targets)" if args.quick else ""
    print(f"\ninstances{smoke}: {'PASS' if ok else 'FAIL'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", type=lambda s: s.split(","), default=["throughput", "across"],
                        help="which measurements: throughput,across (both; one alone for profiling)")
    parser.add_argument("--quick", action="store_true", help="small numbers, for a smoke run")
    parser.add_argument("--sessions", type=int, help="streaming sessions in the throughput runs (100)")
    parser.add_argument("--words", type=int, help="[[long WORDS]] per session in the throughput runs (1000)")
    parser.add_argument("--modes", type=lambda s: s.split(","), default=["burst", "paced"])
    parser.add_argument("--rounds", type=int, help="throughput rounds per mode; median ratios judged (7)")
    parser.add_argument("--paced-ms", type=float, default=2.0, help="gap between SSE events when paced")
    parser.add_argument("--background", type=int, help="sessions streaming during delivery and aborts (50)")
    parser.add_argument("--watch", type=int, help="conversations followed across instances (10)")
    parser.add_argument("--watch-turns", type=int, help="turns each followed conversation runs (2)")
    parser.add_argument("--aborts", type=int, help="aborts sent on B (40)")
    parser.add_argument("--local-aborts", type=int, help="aborts sent on the owner A, for reference (12)")
    parser.add_argument("--concurrency", type=int, help="aborts at a time (4)")
    parser.add_argument("--no-redis", action="store_true", help="skip the variant with the bus over Redis")
    parser.add_argument("--no-single-pg", dest="single_pg", action="store_false",
                        help="skip the reference run on one PostgreSQL instance")
    parser.add_argument("--keep", metavar="DIR", help="keep the servers' data and logs in DIR")
    args = parser.parse_args()
    defaults = (dict(rounds=1, sessions=10, words=200, background=6, watch=2, watch_turns=1, aborts=8, local_aborts=4,
                     concurrency=2)
                if args.quick else
                dict(rounds=7, sessions=100, words=1000, background=50, watch=10, watch_turns=2, aborts=40, local_aborts=12,
                     concurrency=4))
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    # Ctrl-C and SIGTERM cancel the run (`_common.run`): every `finally` on the way stops
    # what it started, and what is still running GRACE seconds later is stopped for it.
    return run(main_async, args, fds=65536)


if __name__ == "__main__":
    sys.exit(main())
