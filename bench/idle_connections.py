"""Memory per idle WebSocket connection: 1,000 idle sockets held against the real server,
on new conversations and on conversations of 100 turns.

The real server (`python server.py`, a child process) is pointed at the fake Anthropic API
(no model call is made). Connections are opened in batches; each reads its `session` frame
and then stays idle. Reported: the server's RSS (psutil) before and after, and its growth
divided by the number of connections.

- empty: each client connects without `conversationId` (the server creates a conversation
  for it, as for a new chat). Target: ≤ 30 KiB each.
- 100 turns: each client opens its own conversation of 100 finished turns (a user message
  and a reply with a web_search tool card, realistic sizes: ~104k characters of visible
  history, ~260k of model-facing history; see tests/seed.py), written into the SQLite file
  before the server starts (one through the store's own ops, then copied row for row in
  SQL). Target: ≤ 64 KiB each: what an open conversation keeps must not grow with it.

File descriptors: the client needs one per socket, the server one per socket plus its own.
This script raises its soft RLIMIT_NOFILE (up to the hard limit) before starting the
server, which inherits it; in production raise the server's with `ulimit -n` (or systemd's
`LimitNOFILE=`) to well above the number of sockets expected.

    python bench/idle_connections.py [--connections 1000] [--batch 100] [--turns 100]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ChatServer, FakeAnthropicProcess, run, verdict, ws_connect  # noqa: E402

import psutil  # noqa: E402

from chat_agent.store import SqliteStore  # noqa: E402
from tests.seed import seed_conversation  # noqa: E402

TARGET_KIB = 30.0
TARGET_LONG_KIB = 64.0
OWNER = "local"  # the one user when auth is off


async def seed(db: Path, count: int, turns: int) -> None:
    """`count` conversations `c0`... of `turns` turns: the first written with the store's ops,
    the others copied from it in SQL (the same rows under another conversation id)."""
    async with SqliteStore(db) as store:
        await seed_conversation(store, OWNER, "c0", turns, created_at=time.time() - 86_400)
    with sqlite3.connect(db) as conn:
        for n in range(1, count):
            conn.execute("INSERT INTO conversations (id, owner, title, created_at, updated_at, last_seq, "
                         "context_overhead) SELECT ?, owner, title, created_at + ?, updated_at + ?, last_seq, "
                         "context_overhead FROM conversations WHERE id = 'c0'", (f"c{n}", n, n))
            conn.execute("INSERT INTO history_items (conversation_id, history, pos, id, data, tokens, chars) "
                         "SELECT ?, history, pos, id, data, tokens, chars FROM history_items "
                         "WHERE conversation_id = 'c0'", (f"c{n}",))


async def open_one(url: str) -> object:
    ws = await ws_connect(url)
    frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
    if frame.get("type") != "session":
        raise RuntimeError(f"expected session, got {frame}")
    return ws


async def open_many(urls: list[str], batch: int) -> list:
    sockets: list = []
    while len(sockets) < len(urls):
        chunk = urls[len(sockets):len(sockets) + batch]
        sockets += await asyncio.gather(*(open_one(url) for url in chunk))
    return sockets


async def settle(proc: psutil.Process, seconds: float = 1.0) -> int:
    """RSS once the server has gone quiet (its writer committed, its buffers freed)."""
    await asyncio.sleep(seconds)
    return proc.memory_info().rss


async def measure(server: ChatServer, label: str, warm: list[str], urls: list[str], batch: int) -> float | None:
    """KiB of server RSS per idle socket on `urls` (None when the server dropped some)."""
    proc = psutil.Process(server.pid)
    # warm-up: let the server import and allocate what any first connections need
    for ws in await open_many(warm, batch):
        await ws.close()
    gc.collect()
    before = await settle(proc)
    t0 = time.perf_counter()
    sockets = await open_many(urls, batch)
    opened = time.perf_counter() - t0
    after = await settle(proc, 2.0)
    fds = proc.num_fds()
    still_open = sum(1 for ws in sockets if ws.state.name == "OPEN")
    per = (after - before) / len(urls) / 1024
    print(f"  {label}: opened {len(urls)} in {opened:.2f} s; {still_open} still open after settling; "
          f"server holds {fds} fds")
    print(f"    server RSS before {before / 2**20:.1f} MiB, with {len(urls)} idle sockets "
          f"{after / 2**20:.1f} MiB: +{(after - before) / 2**20:.2f} MiB = {per:.1f} KiB per connection")
    for ws in sockets:
        await ws.close()
    closed = await settle(proc, 1.0)
    print(f"    after closing them all: {closed / 2**20:.1f} MiB")
    if still_open != len(urls):
        print("FAIL: the server dropped idle connections")
        return None
    return per


async def main_async(args: argparse.Namespace) -> bool:
    fake = FakeAnthropicProcess()
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        server = None
        try:
            server = ChatServer(fake, Path(tmp) / "empty")
            proc = psutil.Process(server.pid)
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            server_limit = proc.rlimit(psutil.RLIMIT_NOFILE)
            print(f"idle connections: {args.connections} sockets in batches of {args.batch}; fd limits: "
                  f"client soft {soft} (hard {hard}), server soft {server_limit[0]}")
            if min(soft, server_limit[0]) < args.connections + 100:
                raise SystemExit(f"fd limit too low for {args.connections} sockets: raise `ulimit -n`")
            url = server.ws_url
            empty = await measure(server, "new conversations", [url] * args.warmup, [url] * args.connections,
                                  args.batch)
            server.stop()
            if empty is None:
                return False

            data = Path(tmp) / "long"
            data.mkdir()
            t0 = time.perf_counter()
            await seed(data / "chat-agent.db", args.warmup + args.connections, args.turns)
            size = (data / "chat-agent.db").stat().st_size
            print(f"  seeded {args.warmup + args.connections} conversations of {args.turns} turns in "
                  f"{time.perf_counter() - t0:.1f} s ({size / 2**20:.0f} MiB of SQLite)")
            server = ChatServer(fake, data)
            urls = [f"{server.ws_url}?conversationId=c{n}" for n in range(args.warmup + args.connections)]
            long = await measure(server, f"conversations of {args.turns} turns", urls[:args.warmup],
                                 urls[args.warmup:], args.batch)
            if long is None:
                return False
            print(f"  empty {empty:.1f} KiB / {TARGET_KIB:.0f}; {args.turns} turns {long:.1f} KiB / "
                  f"{TARGET_LONG_KIB:.0f}")
            return verdict(f"RSS per idle connection / target (worst of 30 KiB empty, {TARGET_LONG_KIB:.0f} KiB at "
                           f"{args.turns} turns)", max(empty / TARGET_KIB, long / TARGET_LONG_KIB), 1.0,
                           higher_is_better=False)
        finally:
            if server is not None:
                server.stop()
            fake.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--turns", type=int, default=100, help="turns of each long conversation")
    args = parser.parse_args()
    return run(main_async, args, fds=max(65536, 4 * args.connections))


if __name__ == "__main__":
    sys.exit(main())
