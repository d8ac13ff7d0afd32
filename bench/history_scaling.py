"""History scaling: what opening a conversation and one turn in it cost at 10 past turns, just
below the summary threshold and at 1,000, through the real server.

Conversations of 10 finished turns, of as many as fit just below the summary threshold (the
worst point: the longest model-facing history a turn is sent, ~295k of the 300,000
characters, ~110 turns; the next turns summarize it), and of 1,000 (a user message and a
reply with a web_search tool card at realistic sizes, model-facing history summarized the
way the server does past 300,000 characters; see tests/seed.py) are written into the SQLite file before the
server starts: one of each size through the store's own ops, then copies of it in SQL, one
per measured turn, so that every turn meets exactly that history. Then, sizes interleaved:

- `session` frame: its size in bytes when a client opens the conversation, and the time
  from connecting to having it. PROTOCOL 1.1 sends the newest 50 messages only.
- one simple turn (`message` → `done`, the fake model's short deterministic reply, no tool):
  the time from sending the message to `done`. A turn reads the model-facing history when it
  starts, and the model is sent that history, whose size a summary bounds (~25k characters
  at 10 turns here, ~295k just below the threshold, ~125k at 1,000, after a summary).
- bare: the same model call made directly with the SDK (that history, the new message, the
  system prompt), interleaved with the turns. The fake model's own work grows with what it is
  sent (it validates every block and counts tokens: +20-30 ms at 125k characters on this
  machine, CPU the server shares), as a real model's time to first token does; that is not
  the server's. So the turn is judged with the model's time held at its 10-turn value:
  turn(N) - bare(N) + bare(10). Both ratios are printed.

A turn that fails is counted and left out. Targets: `session` ≤ 64 KB at 1,000 turns; turn
p50 just below the threshold and at 1,000 turns ≤ 1.3× at 10 turns (the model's time held
equal). The ratio printed is the worst of (frame / 64 KB, each turn ratio / 1.3).

    python bench/history_scaling.py [--turns-per-size 15]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (MODEL, ChatServer, Errors, FakeAnthropicProcess, load_note, median, ms, pct,  # noqa: E402
                     recv_json, run, send_message, verdict, ws_connect)

import anthropic  # noqa: E402

from chat_agent.context.prompts import SYSTEM_PROMPT  # noqa: E402
from chat_agent.store import SetTitle, SqliteStore  # noqa: E402
from tests.seed import SUMMARY_CHARS, copy_conversation, seed_conversation, turn as seed_turn  # noqa: E402

FRAME_TARGET = 64_000
TURN_TARGET = 1.3
MARGIN = 5_000  # characters left below the threshold: the measured turn must not reach it


def turns_below_threshold(seed: int) -> int:
    """The most turns seed_conversation(seed=seed) writes without a summary, the model-facing
    history ending at least MARGIN characters below the threshold."""
    rng, chars, n = random.Random(seed), 0, 0
    while True:
        said = sum(item.chars for item in seed_turn(rng, n, 0.0)[1])
        if chars + said > SUMMARY_CHARS - MARGIN:
            return n
        chars, n = chars + said, n + 1


SIZES = (10, turns_below_threshold(1), 1_000)  # seed n for the n-th size
OWNER = "local"
QUESTION = "What is the next bakery on the list?"


async def seed(db: Path, copies: int) -> None:
    async with SqliteStore(db) as store:
        for n, turns in enumerate(SIZES):
            await seed_conversation(store, OWNER, f"t{turns}-0", turns, created_at=time.time() - 86_400, seed=n)
            # Titled, as the server left it after its first turn: an untitled one gets a title
            # job after the measured turn (a model call and a page read), which would run on
            # the server during the next size's turn.
            await store.apply([SetTitle(OWNER, f"t{turns}-0", f"Trip planning ({turns} turns)")])
    with sqlite3.connect(db) as conn:
        for turns in SIZES:
            for copy in range(1, copies):
                copy_conversation(conn, f"t{turns}-0", f"t{turns}-{copy}")


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
        await ws.send(send_message(QUESTION))
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


async def histories(db: Path) -> dict[int, list[dict]]:
    """Each size's model-facing history as stored, with the new message: what a turn sends."""
    async with SqliteStore(db) as store:
        found = {turns: [item.data for item in await store.load_history(OWNER, f"t{turns}-0", "model")]
                 for turns in SIZES}
    return {turns: [*messages, {"role": "user", "content": [{"type": "text", "text": QUESTION}]}]
            for turns, messages in found.items()}


warnings.filterwarnings("ignore", category=DeprecationWarning)  # the SDK on the fake's default model name


async def bare(client: anthropic.AsyncAnthropic, messages: list[dict]) -> float:
    t0 = time.perf_counter()
    async with await client.messages.create(model=MODEL, max_tokens=1024, system=SYSTEM_PROMPT, messages=messages,
                                            stream=True) as events:
        async for _ in events:
            pass
    return time.perf_counter() - t0


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
            sent = await histories(data / "chat-agent.db")
            server = ChatServer(fake, data)
            client = anthropic.AsyncAnthropic(api_key=fake.api_key, base_url=fake.base_url, max_retries=0)
            results: dict[int, list[tuple[int, float, float]]] = {turns: [] for turns in SIZES}
            bares: dict[int, list[float]] = {turns: [] for turns in SIZES}
            errors = Errors()
            for copy in range(copies):
                for turns in SIZES:
                    try:
                        result = await one(server.ws_url, f"t{turns}-{copy}")
                        took = await bare(client, sent[turns])
                    except Exception as exc:
                        errors.add(exc, f"{turns} turns")
                        continue
                    if copy >= args.warmup:
                        results[turns].append(result)
                        bares[turns].append(took)
            await client.close()
            for turns in SIZES:
                frames = [r[0] for r in results[turns]]
                opens = [r[1] for r in results[turns]]
                times = [r[2] for r in results[turns]]
                chars = sum(len(json.dumps(m)) for m in sent[turns])
                print(f"  {turns:5d} turns: session {max(frames):7,d} bytes, open p50 {ms(median(opens))}; "
                      f"turn p50 {ms(median(times))} p90 {ms(pct(times, 90))}; bare model call "
                      f"({chars:,d} chars sent) p50 {ms(median(bares[turns]))}")
            small, below, large = SIZES
            frame = max(r[0] for r in results[large])
            p50 = {turns: median([r[2] for r in results[turns]]) for turns in SIZES}
            model = {turns: median(bares[turns]) for turns in SIZES}
            print(f"  session at {large} turns {frame:,d} bytes / {FRAME_TARGET:,d} = {frame / FRAME_TARGET:.3f}; "
                  f"{errors.report(copies * len(SIZES))}; {load_note()}")
            worst = frame / FRAME_TARGET
            ok = not errors
            for turns, label in ((below, "just below the summary threshold"), (large, "")):
                raw = p50[turns] / p50[small]
                held = (p50[turns] - model[turns] + model[small]) / p50[small]
                ok = verdict(f"  turn p50 at {turns} turns {label} / {small} turns, model time held (as measured "
                             f"{raw:.3f})", held, TURN_TARGET, higher_is_better=False) and ok
                worst = max(worst, held / TURN_TARGET)
            return verdict("history scaling: worst of session/64 KB and each turn ratio (model time held)/1.3",
                           worst, 1.0, higher_is_better=False) and ok
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
