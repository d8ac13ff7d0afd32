"""Frame relay: 50 concurrent sessions each streaming a long reply, ours vs a bare relay.

Both servers are child processes served by uvicorn the same way (per-message-deflate off) and
stream the same fake Anthropic reply (`[[long 2000]]`: ~17.8k characters in 40-character
text deltas, ~445 deltas per reply) from the same fake, which runs in its own process. The
same client code drives both: 50 `websockets` connections, one warm-up turn each, then
ROUNDS timed turns each, all sessions concurrently. The bare relay sends one JSON frame per
text delta; ours sends one `content_chunk` per delta plus its other frames (`context_update`,
`done`), each logged to SQLite before it is sent. The benchmark checks that both relayed the
same number of text-delta frames.

Reported: text-delta frames per second (wall clock, from the first message sent to the last
`done`), server, fake and client CPU (psutil) and the median time from sending a message to
its first text frame, for both; the ratio ours/bare of frames/s (median over trials, which
alternate bare and ours). Target: ≥ 0.8.

    python bench/relay.py [--sessions 50] [--words 2000] [--rounds 1] [--trials 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (PY, ChatServer, Child, FakeAnthropicProcess, free_port, median, proc_cpu,  # noqa: E402
                     send_message, run, verdict, ws_connect)

TARGET = 0.8


class Bare(Child):
    def __init__(self, fake: FakeAnthropicProcess, log: Path):
        self.port = free_port()
        super().__init__([PY, str(Path(__file__).with_name("bare_relay.py")), "--port", str(self.port)],
                         env={"ANTHROPIC_BASE_URL": fake.base_url, "ANTHROPIC_API_KEY": fake.api_key}, log=log)
        self.wait_ready(f"http://127.0.0.1:{self.port}/health")

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/api/chat-agent"


async def _turn(ws, content: str, firsts: list[float] | None = None) -> tuple[int, int]:
    """Sends one message and reads up to `done`: (text-delta frames, all frames)."""
    t0 = time.perf_counter()
    await ws.send(send_message(content))
    chunks = frames = 0
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), 60))
        frames += 1
        kind = frame["type"]
        if kind == "content_chunk":
            chunks += 1
            if chunks == 1 and firsts is not None:
                firsts.append(time.perf_counter() - t0)
        elif kind == "done":
            return chunks, frames
        elif kind == "error":
            raise RuntimeError(f"server error frame: {frame}")


async def drive(url: str, server_pid: int, fake_pid: int, sessions: int, words: int, rounds: int) -> dict:
    sockets = []
    for _ in range(sessions):
        ws = await ws_connect(url)
        json.loads(await ws.recv())  # session
        sockets.append(ws)
    await asyncio.gather(*(_turn(ws, "[[long 200]]") for ws in sockets))  # warm-up

    firsts: list[float] = []

    async def one(ws) -> tuple[int, int]:
        chunks = frames = 0
        for _ in range(rounds):
            c, f = await _turn(ws, f"[[long {words}]]", firsts)
            chunks, frames = chunks + c, frames + f
        return chunks, frames

    cpu0, fake0, client0, t0 = proc_cpu(server_pid), proc_cpu(fake_pid), time.process_time(), time.perf_counter()
    counts = await asyncio.gather(*(one(ws) for ws in sockets))
    elapsed = time.perf_counter() - t0
    cpu, client = proc_cpu(server_pid) - cpu0, time.process_time() - client0
    fake_cpu = proc_cpu(fake_pid) - fake0
    for ws in sockets:
        await ws.close()
    chunks = sum(c for c, _ in counts)
    per_session = {c for c, _ in counts}
    return {"chunks": chunks, "frames": sum(f for _, f in counts), "elapsed": elapsed, "server_cpu": cpu,
            "client_cpu": client, "fake_cpu": fake_cpu, "per_session": per_session,
            "first": median(firsts)}


def report(name: str, r: dict) -> None:
    print(f"  {name:5s} {r['chunks']:7d} text frames ({r['frames']} in all) in {r['elapsed']:.2f} s = "
          f"{r['chunks'] / r['elapsed']:8.0f} frames/s; server CPU {r['server_cpu']:.2f} s "
          f"({r['server_cpu'] / r['chunks'] * 1e6:.0f} µs/frame, {r['server_cpu'] / r['elapsed']:.0%} of a core), "
          f"fake CPU {r['fake_cpu']:.2f} s ({r['fake_cpu'] / r['elapsed']:.0%}), client CPU {r['client_cpu']:.2f} s "
          f"({r['client_cpu'] / r['elapsed']:.0%}); median time to first text frame {r['first'] * 1000:.0f} ms")


async def main_async(args: argparse.Namespace) -> bool:
    fake = FakeAnthropicProcess()
    results: dict[str, list[dict]] = {"bare": [], "ours": []}
    with tempfile.TemporaryDirectory(prefix="bench-relay-") as tmp:
        servers: dict[str, Child] = {}
        try:
            servers["bare"] = Bare(fake, Path(tmp) / "bare.log")
            servers["ours"] = ChatServer(fake, Path(tmp) / "ours")
            print(f"relay: {args.sessions} sessions x {args.rounds} turns of [[long {args.words}]] "
                  f"(fake Anthropic pid {fake.pid}, bare pid {servers['bare'].pid}, ours pid {servers['ours'].pid}, "
                  f"{os.cpu_count()} cores)")
            for trial in range(args.trials):
                for name in ("bare", "ours"):  # alternate, so drift hits both
                    server = servers[name]
                    r = await drive(server.ws_url, server.pid, fake.pid, args.sessions, args.words, args.rounds)
                    results[name].append(r)
                    report(f"{name}", r)
        finally:
            for server in servers.values():
                server.stop()
            fake.stop()
    bare_chunks = {r["chunks"] for r in results["bare"]}
    ours_chunks = {r["chunks"] for r in results["ours"]}
    if bare_chunks != ours_chunks or len(bare_chunks) != 1:
        print(f"MISMATCH: text frames bare {bare_chunks} vs ours {ours_chunks}")
        return False
    print(f"  both relayed {bare_chunks.pop()} text-delta frames per trial "
          f"({results['ours'][0]['per_session'].pop()} per session)")
    bare_fps = median([r["chunks"] / r["elapsed"] for r in results["bare"]])
    ours_fps = median([r["chunks"] / r["elapsed"] for r in results["ours"]])
    bare_cpu = median([r["server_cpu"] / r["chunks"] for r in results["bare"]])
    ours_cpu = median([r["server_cpu"] / r["chunks"] for r in results["ours"]])
    print(f"\nmedian over {args.trials} trials: bare {bare_fps:.0f} frames/s, ours {ours_fps:.0f} frames/s")
    print(f"server CPU per text frame: bare {bare_cpu * 1e6:.0f} µs, ours {ours_cpu * 1e6:.0f} µs "
          f"(ours/bare {ours_cpu / bare_cpu:.2f}x)")
    return verdict("relay frames/s ours/bare", ours_fps / bare_fps, TARGET, higher_is_better=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--words", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    return run(main_async, args, fds=65536)


if __name__ == "__main__":
    sys.exit(main())
