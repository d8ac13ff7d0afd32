"""Shared plumbing for the benchmarks: the fake Anthropic API and servers as child processes,
a WebSocket client, statistics and the PASS/FAIL line.

Everything runs on loopback. Child processes are started by the benchmark and stopped by it
(by their own pid), whatever happens: Ctrl-C or SIGTERM cancels the bench (its `finally`
blocks stop what they started), and if it has not ended GRACE seconds later (stuck in a call
that does not give way, a libpq connect to a PostgreSQL that ran out of connections, say),
every child still running is stopped and the process exits.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any, Awaitable, Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/x.py` puts bench/ first, not the repo root
    sys.path.insert(0, str(ROOT))

PY = sys.executable
FAKE_KEY = "bench-key"
# The fake rejects nothing by model name; this is what the server uses by default.
MODEL = "claude-sonnet-4-5"
GRACE = 15.0  # seconds a cancelled bench has to stop its children before they are stopped for it
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
# The children running now, so that a bench stuck after Ctrl-C still leaves none behind.
_children: set["Child"] = set()


def _unblock_stop_signals() -> None:
    """In a child between fork and exec: the mask `run` set on this thread is inherited, and
    a child must die of SIGTERM."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def raise_fd_limit(want: int = 65536) -> int:
    """Raises this process's soft fd limit (children inherit it); returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Child:
    """A child process we started; `stop()` ends exactly it (and its process group)."""

    def __init__(self, argv: Sequence[str], *, env: dict[str, str] | None = None, log: Path | None = None,
                 capture_stdout: bool = False):
        self.log_path = log
        out = subprocess.PIPE if capture_stdout else (open(log, "ab") if log else subprocess.DEVNULL)
        self.proc = subprocess.Popen(list(argv), cwd=ROOT, env={**os.environ, **(env or {})}, stdout=out,
                                     stderr=subprocess.STDOUT if log or capture_stdout else subprocess.DEVNULL,
                                     start_new_session=True, preexec_fn=_unblock_stop_signals)
        _children.add(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        _children.discard(self)
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the group of the child we started, nothing else
            self.proc.wait(5)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path and self.log_path.exists() else ""

    def wait_ready(self, url: str, timeout: float = 60.0) -> None:
        """Waits for `url` to answer 200; stops the child if it never does."""
        try:
            wait_http(url, self, timeout)
        except BaseException:
            self.stop()
            raise


class FakeAnthropicProcess(Child):
    """The project's fake Anthropic API (`python -m tests.fakes.anthropic_fake`) in its own
    process, so it does not share a core with the client."""

    def __init__(self) -> None:
        argv = [PY, "-m", "tests.fakes.anthropic_fake", "--port", "0"]
        super().__init__(argv, capture_stdout=True)
        assert self.proc.stdout is not None
        try:
            line = self.proc.stdout.readline().decode().strip()
        except BaseException:
            self.stop()
            raise
        if not line.startswith("http"):
            self.stop()
            raise RuntimeError(f"fake Anthropic did not start: {line!r}")
        self.base_url = line
        self.api_key = FAKE_KEY


def wait_http(url: str, child: Child, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.alive():
            raise RuntimeError(f"{url}: process exited with {child.proc.returncode}:\n{child.log()}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up:\n{child.log()}")


def server_env(fake: FakeAnthropicProcess, data_dir: Path, port: int, **extra: str) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": fake.base_url, "ANTHROPIC_API_KEY": fake.api_key,
            "CHAT_AGENT_DATA_DIR": str(data_dir), "CHAT_AGENT_PORT": str(port), "CHAT_AGENT_HOST": "127.0.0.1",
            "CHAT_AGENT_LOG_LEVEL": "WARNING", "CHAT_AGENT_LLM_MAX_RETRIES": "0",
            "EXA_API_KEY": "", "EXA_BASE_URL": "", **extra}


class ChatServer(Child):
    """Our real server (`python server.py`, or a bench entry that wraps it) as a child process."""

    def __init__(self, fake: FakeAnthropicProcess, data_dir: Path, *, script: str = "server.py",
                 env: dict[str, str] | None = None):
        data_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        argv = [PY, script] if script.endswith(".py") else [PY, "-m", script]
        super().__init__(argv, env=server_env(fake, data_dir, self.port, **(env or {})), log=data_dir / "server.log")
        self.wait_ready(f"http://127.0.0.1:{self.port}/health")

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/api/chat-agent"


class BareRelay(Child):
    """bench/bare_relay.py, the baseline relay, as a child process."""

    def __init__(self, fake: FakeAnthropicProcess, log: Path):
        self.port = free_port()
        # The environment ours gets, so that bare_relay.py builds the same request.
        env = server_env(fake, log.parent / "bare-data", self.port)
        super().__init__([PY, str(Path(__file__).with_name("bare_relay.py")), "--port", str(self.port)], env=env,
                         log=log)
        self.wait_ready(f"http://127.0.0.1:{self.port}/health")

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/api/chat-agent"


async def ws_connect(url: str) -> Any:
    import websockets
    # Same settings as the project's own tests: no compression, no frame size cap, no pings.
    return await websockets.connect(url, compression=None, max_size=None, ping_interval=None,
                                    open_timeout=30, close_timeout=2)


async def recv_json(ws: Any, timeout: float = 30.0) -> dict[str, Any]:
    # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that comes
    # as the frame does, and a session loop cancelled that way runs on forever.
    async with asyncio.timeout(timeout):
        return json.loads(await ws.recv())


def send_message(content: str) -> str:
    return json.dumps({"type": "message", "content": content})


# ---- statistics -------------------------------------------------------------------------

def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), nearest rank."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


def verdict(name: str, ratio: float, target: float, *, higher_is_better: bool) -> bool:
    ok = ratio >= target if higher_is_better else ratio <= target
    sign = "≥" if higher_is_better else "≤"
    print(f"\n{name}: ratio {ratio:.3f} (target {sign} {target}) -> {'PASS' if ok else 'FAIL'}")
    return ok


def use_uvloop() -> None:
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def run(main_async: Callable[[Any], Awaitable[bool]], args: Any, *, fds: int | None = None) -> int:
    """Runs a bench on uvloop where installed, with `fds` file descriptors allowed if given;
    exit status 0 when it met its target, 1 when it missed it, 130 when stopped by a signal.

    SIGINT and SIGTERM are taken by a thread of their own (blocked in this one), so they are
    seen even while this thread is stuck in C: the bench is cancelled, and GRACE seconds
    later whatever it started and did not stop is stopped and the process exits."""
    if fds is not None:
        raise_fd_limit(fds)
    use_uvloop()
    main: dict[str, Any] = {}

    async def guarded() -> bool:
        main["loop"], main["task"] = asyncio.get_running_loop(), asyncio.current_task()
        return await main_async(args)

    def on_signal() -> None:
        signum = signal.sigwait(STOP_SIGNALS)
        print(f"\n{signal.Signals(signum).name}: stopping (children are stopped in at most {GRACE:.0f} s)",
              file=sys.stderr, flush=True)
        if "task" in main:
            main["loop"].call_soon_threadsafe(main["task"].cancel)
        time.sleep(GRACE)
        stop_children()
        os._exit(130)

    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    threading.Thread(target=on_signal, name="bench-signals", daemon=True).start()
    try:
        return 0 if asyncio.run(guarded()) else 1
    except asyncio.CancelledError:
        return 130
    finally:
        stop_children()


def stop_children() -> None:
    """Stops every child still running (each by its own pid and process group)."""
    for child in list(_children):
        child.stop(timeout=3)


class Errors:
    """What went wrong, counted by kind instead of ending the bench: a run with a few failed
    turns still gives its figures, and says how many failed."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.examples: dict[str, str] = {}

    def add(self, exc: BaseException, where: str = "") -> None:
        kind = f"{where}: {type(exc).__name__}" if where else type(exc).__name__
        self.kinds[kind] += 1
        self.examples.setdefault(kind, " ".join(str(exc).split())[:200])

    def keep(self, results: Sequence[Any], where: str = "") -> list[Any]:
        """The results of a `gather(..., return_exceptions=True)` that are not exceptions,
        counting those that are (a cancellation is passed on: it is the bench's own)."""
        kept = []
        for result in results:
            if isinstance(result, asyncio.CancelledError):
                raise result
            if isinstance(result, BaseException):
                self.add(result, where)
            else:
                kept.append(result)
        return kept

    def __len__(self) -> int:
        return sum(self.kinds.values())

    def report(self, total: int | None = None) -> str:
        if not self.kinds:
            return "errors: 0"
        of = f" of {total}" if total is not None else ""
        return f"errors: {len(self)}{of} (" + "; ".join(
            f"{n}× {kind}: {self.examples[kind]}" for kind, n in self.kinds.most_common()) + ")"


def judge_rounds(rounds: Sequence[dict[str, float]], load: str,
                 targets: Sequence[tuple[str, str, float, bool]]) -> bool:
    """Prints each round's ratios and judges their median: `targets` are (key, label, target,
    higher_is_better). One round on two shared cores swings too far to judge alone."""
    ok = True
    for key, label, target, higher in targets:
        values = [r[key] for r in rounds if key in r]
        if not values:
            print(f"    {load}: {label}: no round finished -> FAIL")
            ok = False
            continue
        each = ", ".join(f"{v:.2f}" for v in values)
        ok = verdict(f"    {load}: {label} (rounds {each}; median)", median(values), target,
                     higher_is_better=higher) and ok
    return ok


def load_note() -> str:
    """The machine's load, to print beside figures measured on it."""
    return f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"


def proc_cpu(pid: int) -> float:
    """User+system CPU seconds of a process so far."""
    import psutil
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


# ---- streaming sessions (relay.py, instances.py) ------------------------------------------

async def stream_turn(ws: Any, content: str) -> dict[str, Any]:
    """Sends one message and reads up to `done`: its text, frames and arrival times."""
    t0 = time.perf_counter()
    await ws.send(send_message(content))
    arrivals: list[tuple[float, int]] = []  # (seconds after sending, characters)
    frames = 0
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), 120))
        frames += 1
        kind = frame["type"]
        if kind == "content_chunk":
            arrivals.append((time.perf_counter() - t0, len(frame["content"])))
        elif kind == "done":
            return {"end": time.perf_counter() - t0, "arrivals": arrivals, "frames": frames,
                    "text_frames": len(arrivals), "chars": sum(n for _, n in arrivals)}
        elif kind == "error":
            raise RuntimeError(f"server error frame: {frame}")


def half_time(turn: dict[str, Any]) -> float:
    """Seconds from sending until half of the turn's reply text had arrived."""
    half, seen = turn["chars"] / 2, 0
    for at, n in turn["arrivals"]:
        seen += n
        if seen >= half:
            return at
    return turn["end"]


def late_share(turn: dict[str, Any]) -> float:
    """The share of the turn's reply text that arrived in its last 100 ms."""
    late = sum(n for at, n in turn["arrivals"] if at >= turn["end"] - 0.1)
    return late / max(1, turn["chars"])


async def until_title(ws: Any) -> bool:
    """Whether the conversation got its title (a title call the fake could not answer in
    time must not end the benchmark: the session is measured all the same)."""
    try:
        while json.loads(await asyncio.wait_for(ws.recv(), 20))["type"] != "title":
            pass
    except asyncio.TimeoutError:
        return False
    return True


async def open_session(url: str, timeout: float = 30.0) -> Any:
    """A socket that got its `session` frame (closed again if the first frame is another)."""
    ws = await ws_connect(url)
    frame = json.loads(await asyncio.wait_for(ws.recv(), timeout))
    if frame.get("type") != "session":
        await ws.close()
        raise RuntimeError(f"expected `session`, got {frame}")
    return ws


async def settle(pids: Sequence[int], service_cpu: Callable[[], float] | None = None, timeout: float = 15.0) -> None:
    """Waits until these servers are idle (each below 10% of a core over 0.5 s), and the
    services behind them too (`service_cpu`, the database's processes: below 20% of a core):
    what one measurement leaves running must not weigh on the next."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = sum(proc_cpu(pid) for pid in pids)
        services = service_cpu() if service_cpu is not None else 0.0
        await asyncio.sleep(0.5)
        busy = sum(proc_cpu(pid) for pid in pids) - before >= 0.05 * len(pids)
        if not busy and (service_cpu is None or service_cpu() - services < 0.1):
            return


async def drive(urls: Sequence[str], server_pids: Sequence[int], fake_pid: int, sessions: int, content: str,
                titled: bool, service_cpu: Callable[[], float] | None = None) -> dict[str, Any]:
    """`sessions` sockets, each on a new conversation, spread round robin over `urls`: one
    warm-up turn each (and, if `titled`, its title), then one timed turn each, all at once.
    CPU is summed over `server_pids`. A socket that fails to open, or a turn that fails (an
    `error` frame, a timeout), is counted in `errors` and left out of the figures.

    The timed turns start once the servers (and `service_cpu`'s processes) are idle again:
    the warm-up's tail (its titles' commits, on PostgreSQL their search indexing and job
    bookkeeping) is work of the warm-up, not of the burst, and it weighs on one store more
    than on another."""
    errors = Errors()
    opened = errors.keep(await asyncio.gather(*(open_session(urls[i % len(urls)]) for i in range(sessions)),
                                              return_exceptions=True), "open")
    warm = await asyncio.gather(*(stream_turn(ws, "[[long 50]]") for ws in opened), return_exceptions=True)
    sockets = [ws for ws, result in zip(opened, warm) if not isinstance(result, BaseException)]
    errors.keep(warm, "warm-up turn")
    if titled:  # the first exchange names the conversation in the background: not part of the stream
        titled_sessions = sum(await asyncio.gather(*(until_title(ws) for ws in sockets)))
        if titled_sessions < len(sockets):
            print(f"    ({len(sockets) - titled_sessions} sessions got no title within 20 s)")

    await settle(server_pids, service_cpu)

    def server_cpu() -> float:
        return sum(proc_cpu(pid) for pid in server_pids)

    def services() -> float:
        return service_cpu() if service_cpu is not None else 0.0

    cpu0, fake0, client0, t0 = server_cpu(), proc_cpu(fake_pid), time.process_time(), time.perf_counter()
    services0 = services()
    turns = errors.keep(await asyncio.gather(*(stream_turn(ws, content) for ws in sockets), return_exceptions=True),
                        "timed turn")
    elapsed = time.perf_counter() - t0
    cpu, client = server_cpu() - cpu0, time.process_time() - client0
    services_cpu = services() - services0
    fake_cpu = proc_cpu(fake_pid) - fake0
    await asyncio.gather(*(ws.close() for ws in opened), return_exceptions=True)
    turns = [t for t in turns if t["arrivals"]]
    if not turns:
        raise RuntimeError(f"no turn delivered any text; {errors.report(sessions)}")
    chars = sum(t["chars"] for t in turns)
    frames = sum(t["frames"] for t in turns)
    return {"chars": chars, "per_session": {t["chars"] for t in turns}, "elapsed": elapsed,
            "text_frames": sum(t["text_frames"] for t in turns), "frames": frames,
            "server_cpu": cpu, "client_cpu": client, "fake_cpu": fake_cpu, "services_cpu": services_cpu,
            "errors": errors,
            "first": median([t["arrivals"][0][0] for t in turns]), "half": median([half_time(t) for t in turns]),
            "late": median([late_share(t) for t in turns]), "throughput": chars / elapsed,
            "frames_per_s": frames / elapsed}
