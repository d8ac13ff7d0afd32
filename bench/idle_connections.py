"""Memory per idle WebSocket connection: 1,000 idle sockets held against the real server.

The real server (`python server.py`, a child process) is pointed at the fake Anthropic API
(no model call is made). Each client connects without `conversationId` (so the server
creates a conversation for it, as for a new chat), reads its `session` frame and then stays
idle. Connections are opened in batches. Reported: the server's RSS (psutil) before and
after, and its growth divided by the number of connections. Target: ≤ 30 KiB each.

File descriptors: the client needs one per socket, the server one per socket plus its own.
This script raises its soft RLIMIT_NOFILE (up to the hard limit) before starting the
server, which inherits it; in production raise the server's with `ulimit -n` (or systemd's
`LimitNOFILE=`) to well above the number of sockets expected.

    python bench/idle_connections.py [--connections 1000] [--batch 100]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ChatServer, FakeAnthropicProcess, run, verdict, ws_connect  # noqa: E402

import psutil  # noqa: E402

TARGET_KIB = 30.0


async def open_one(url: str) -> object:
    ws = await ws_connect(url)
    frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
    if frame.get("type") != "session":
        raise RuntimeError(f"expected session, got {frame}")
    return ws


async def open_many(url: str, n: int, batch: int) -> list:
    sockets: list = []
    while len(sockets) < n:
        size = min(batch, n - len(sockets))
        sockets += await asyncio.gather(*(open_one(url) for _ in range(size)))
    return sockets


async def settle(proc: psutil.Process, seconds: float = 1.0) -> int:
    """RSS once the server has gone quiet (its writer committed, its buffers freed)."""
    await asyncio.sleep(seconds)
    return proc.memory_info().rss


async def main_async(args: argparse.Namespace) -> bool:
    fake = FakeAnthropicProcess()
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        server = None
        try:
            server = ChatServer(fake, Path(tmp) / "server")
            proc = psutil.Process(server.pid)
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            server_limit = proc.rlimit(psutil.RLIMIT_NOFILE)
            print(f"idle connections: {args.connections} sockets in batches of {args.batch}; fd limits: "
                  f"client soft {soft} (hard {hard}), server soft {server_limit[0]}")
            if min(soft, server_limit[0]) < args.connections + 100:
                raise SystemExit(f"fd limit too low for {args.connections} sockets: raise `ulimit -n`")
            # warm-up: let the server import and allocate what any first connections need
            warm = await open_many(server.ws_url, args.warmup, args.batch)
            for ws in warm:
                await ws.close()
            gc.collect()
            before = await settle(proc)
            t0 = time.perf_counter()
            sockets = await open_many(server.ws_url, args.connections, args.batch)
            opened = time.perf_counter() - t0
            after = await settle(proc, 2.0)
            fds = proc.num_fds()
            still_open = sum(1 for ws in sockets if ws.state.name == "OPEN")
            per = (after - before) / args.connections / 1024
            print(f"  opened {args.connections} in {opened:.2f} s; {still_open} still open after settling; "
                  f"server holds {fds} fds")
            print(f"  server RSS before {before / 2**20:.1f} MiB, with {args.connections} idle sockets "
                  f"{after / 2**20:.1f} MiB: +{(after - before) / 2**20:.2f} MiB = {per:.1f} KiB per connection")
            for ws in sockets:
                await ws.close()
            closed = await settle(proc, 1.0)
            print(f"  after closing them all: {closed / 2**20:.1f} MiB")
            if still_open != args.connections:
                print("FAIL: the server dropped idle connections")
                return False
            return verdict("RSS per idle connection / 30 KiB", per / TARGET_KIB, 1.0, higher_is_better=False)
        finally:
            if server is not None:
                server.stop()
            fake.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=100)
    args = parser.parse_args()
    return run(main_async, args, fds=max(65536, 4 * args.connections))


if __name__ == "__main__":
    sys.exit(main())
