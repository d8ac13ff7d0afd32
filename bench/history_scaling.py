"""History scaling: what opening a conversation and one turn in it cost at 10, 100 and 1,000
past turns, through the real server.

Conversations of 10, 100 and 1,000 finished turns (a user message and a reply with a
web_search tool card at realistic sizes, model-facing history summarized the way the server
does past 300,000 characters; see tests/seed.py) are written into the SQLite file before the
server starts: one of each size through the store's own ops, then copies of it in SQL, one
per measured turn, so that every turn meets exactly that history. Then, sizes interleaved:

- `session` frame: its size in bytes when a client opens the conversation, and the time
  from connecting to having it. PROTOCOL 1.1 sends the newest 50 messages only.
- one simple turn (`message` → `done`, the fake model's short deterministic reply, no tool):
  the time from sending the message to `done`. A turn reads the model-facing history when it
  starts, and the model is sent that history, whose size a summary bounds.

Targets: `session` ≤ 64 KB at 1,000 turns; turn p50 at 1,000 turns ≤ 1.5× at 10 turns. The
ratio printed is the worse of (frame / 64 KB, p50 ratio / 1.5).

    python bench/history_scaling.py [--turns-per-size 15]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ChatServer, FakeAnthropicProcess, median, ms, pct, recv_json, run, send_message, verdict, ws_connect  # noqa: E402,E501

from chat_agent.store import SqliteStore  # noqa: E402
from tests.seed import seed_conversation  # noqa: E402

SIZES = (10, 100, 1_000)
FRAME_TARGET = 64_000
TURN_TARGET = 1.5
OWNER = "local"


async def seed(db: Path, copies: int) -> None:
    async with SqliteStore(db) as store:
        for n, turns in enumerate(SIZES):
            await seed_conversation(store, OWNER, f"t{turns}-0", turns, created_at=time.time() - 86_400, seed=n)
    with sqlite3.connect(db) as conn:
        for turns in SIZES:
            source = f"t{turns}-0"
            for copy in range(1, copies):
                target = f"t{turns}-{copy}"
                conn.execute("INSERT INTO conversations (id, owner, title, created_at, updated_at, last_seq, "
                             "context_overhead) SELECT ?, owner, title, created_at, updated_at, last_seq, "
                             "context_overhead FROM conversations WHERE id = ?", (target, source))
                conn.execute("INSERT INTO history_items (conversation_id, history, pos, id, data, tokens, chars) "
                             "SELECT ?, history, pos, id, data, tokens, chars FROM history_items "
                             "WHERE conversation_id = ?", (target, source))


async def one(url: str, conversation_id: str) -> tuple[int, float, float]:
    """Opens the conversation and runs one turn: session bytes, open time, turn time."""
    t0 = time.perf_counter()
    ws = await ws_connect(f"{url}?conversationId={conversation_id}")
    try:
        text = await asyncio.wait_for(ws.recv(), 30)
        opened = time.perf_counter() - t0
        session = json.loads(text)
        assert session["type"] == "session" and len(session["messages"]) <= 50, session.get("type")
        t0 = time.perf_counter()
        await ws.send(send_message("What is the next bakery on the list?"))
        while True:
            frame = await recv_json(ws)
            if frame["type"] == "done":
                break
        turn = time.perf_counter() - t0
        if frame["stopReason"] != "end_turn":
            raise RuntimeError(f"turn ended with {frame}")
        return len(text.encode()), opened, turn
    finally:
        await ws.close()


async def main_async(args: argparse.Namespace) -> bool:
    fake = FakeAnthropicProcess()
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        server = None
        try:
            data = Path(tmp) / "data"
            data.mkdir()
            copies = args.warmup + args.turns_per_size
            t0 = time.perf_counter()
            await seed(data / "chat-agent.db", copies)
            print(f"history scaling: {copies} conversations each of {', '.join(map(str, SIZES))} turns seeded in "
                  f"{time.perf_counter() - t0:.1f} s; {args.warmup} warm-up and {args.turns_per_size} measured "
                  f"turns per size, sizes interleaved")
            server = ChatServer(fake, data)
            results: dict[int, list[tuple[int, float, float]]] = {turns: [] for turns in SIZES}
            for copy in range(copies):
                for turns in SIZES:
                    result = await one(server.ws_url, f"t{turns}-{copy}")
                    if copy >= args.warmup:
                        results[turns].append(result)
            for turns in SIZES:
                frames = [r[0] for r in results[turns]]
                opens = [r[1] for r in results[turns]]
                times = [r[2] for r in results[turns]]
                print(f"  {turns:5d} turns: session {max(frames):7,d} bytes, open p50 {ms(median(opens))}, "
                      f"turn p50 {ms(median(times))} p90 {ms(pct(times, 90))}")
            frame = max(r[0] for r in results[SIZES[-1]])
            p50 = {turns: median([r[2] for r in results[turns]]) for turns in SIZES}
            ratio = p50[SIZES[-1]] / p50[SIZES[0]]
            print(f"  session at {SIZES[-1]} turns {frame:,d} bytes / {FRAME_TARGET:,d} = {frame / FRAME_TARGET:.3f}; "
                  f"turn p50 {SIZES[-1]} / {SIZES[0]} turns = {ratio:.3f} (target ≤ {TURN_TARGET})")
            return verdict("history scaling: worst of session/64 KB and (turn p50 ratio)/1.5",
                           max(frame / FRAME_TARGET, ratio / TURN_TARGET), 1.0, higher_is_better=False)
        finally:
            if server is not None:
                server.stop()
            fake.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns-per-size", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    return run(main_async, args)


if __name__ == "__main__":
    sys.exit(main())
