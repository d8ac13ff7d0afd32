"""Turn cost against history length: a one-tool turn on conversations of 10 turns, 1,000
turns (summarized as the server does past 300,000 characters), one just below the summary
threshold, and 1,000 short turns (2,000 messages, no summary), through the real server on
the fake Anthropic API.

The conversations are written into the SQLite file before the server starts (tests/seed.py).
One socket per conversation; the sizes take turns in blocks of `--block` back-to-back turns
(each a `[[tool noop {}]]` message: a tool_use, the no-op tool, a short answer: two model
calls), so each size's turns meet a history already loaded, as a conversation going on does.
The first block of each size is warm-up (its first turn reads the history from the store).
Per size: turn p50 (message → done) and the server's CPU per turn (user + system of its
process over each size's blocks, divided by their turns).

The upstream's own work grows with what it is sent (the fake validates and counts every
block), and so does sending it; the issue leaves sending the request out. So beside each
block the turn's two model calls are made on that history by a bare client at the least a
client can spend (the bodies encoded beforehand, posted as bytes on our HTTP client, the
SDK's aiohttp one, the events read as JSON; its wall time and this process's CPU, medians of
three), and both figures are also judged with those held at their 10-turn values:
turn(N) − bare(N) + bare(10), cpu(N) − bare_cpu(N) + bare_cpu(10). (The SDK's
`messages.stream` as the bare client spent more on a big history than our whole turn:
held, the turn came out negative.) Both the measured and the held figures are printed.

Also, in-process: `ConversationManager.load` of each conversation's model-facing history
(what a turn start paid when the history was read back every turn).

Target: turn p50 and CPU per turn, both held, at every other size, ≤ 1.3× at 10 turns
(ratio = the worst of them / 1.3).

    python bench/turn_cost.py [--blocks 16] [--block 5] [--profile out.prof]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (MODEL, ChatServer, FakeAnthropicProcess, median, ms, proc_cpu, recv_json,  # noqa: E402
                     run, send_message, verdict, ws_connect)

import anthropic  # noqa: E402

from chat_agent.config import Settings  # noqa: E402
from chat_agent.context.conversation import ConversationManager  # noqa: E402
from chat_agent.context.prompts import SYSTEM_PROMPT  # noqa: E402
from chat_agent.context.tokens import TokenCounter  # noqa: E402
from chat_agent.store import SqliteStore, StoreWriter  # noqa: E402
from tests.seed import SUMMARY_CHARS, seed_conversation, turn  # noqa: E402

OWNER = "local"
PROMPT = "[[tool noop {}]] please"
TARGET = 1.3
BELOW = SUMMARY_CHARS - 12_000  # room for the measured turns before a summary would run

warnings.filterwarnings("ignore", category=DeprecationWarning)  # the SDK on the fake's default model name


def turns_below(chars: int, seed: int) -> int:
    """How many of seed_conversation's turns (with that seed) stay under `chars` of
    model-facing history."""
    rng, total, n = random.Random(seed), 0, 0
    while True:
        _, model = turn(rng, n, 0.0)
        total += sum(item.chars for item in model)
        if total >= chars:
            return n
        n += 1


async def seed(db: Path) -> dict[str, int]:
    """The sizes: turns with a tool card each, and (last) short turns of text alone, 2,000
    model-facing messages and no summary (what a long soak of small turns leaves)."""
    sizes = {"10 turns": 10, "1,000 turns": 1_000, "below threshold": turns_below(BELOW, 2), "1,000 short": 1_000}
    async with SqliteStore(db) as store:
        for n, (name, turns) in enumerate(sizes.items()):
            await seed_conversation(store, OWNER, f"c{n}", turns, created_at=time.time() - 86_400, seed=n,
                                    tools=name != "1,000 short")
    return sizes


async def load_times(db: Path, ids: list[str], repeat: int = 20) -> dict[str, tuple[float, int]]:
    """`ConversationManager.load` of each conversation's model-facing history: p50, characters."""
    settings, counter, out = Settings(), TokenCounter(), {}
    async with SqliteStore(db) as store:
        writer = StoreWriter(store)
        writer.start()
        try:
            for cid in ids:
                times = []
                for _ in range(repeat):
                    manager = ConversationManager(OWNER, cid, counter=counter, writer=writer, store=store,
                                                  summary_chars=settings.summary_chars,
                                                  max_tokens=settings.max_context_tokens)
                    t0 = time.perf_counter()
                    await manager.load()
                    times.append(time.perf_counter() - t0)
                out[cid] = (median(times), manager.chars)
        finally:
            await writer.close()
    return out


class Socket:
    def __init__(self, url: str, cid: str):
        self.url, self.cid, self.ws = url, cid, None

    async def open(self) -> None:
        self.ws = await ws_connect(f"{self.url}?conversationId={self.cid}")
        session = await recv_json(self.ws)
        assert session["type"] == "session", session

    async def turn(self) -> float:
        t0 = time.perf_counter()
        await self.ws.send(send_message(PROMPT))
        kinds = []
        while True:
            frame = await recv_json(self.ws, 60)
            kinds.append(frame["type"])
            if frame["type"] == "done":
                break
        took = time.perf_counter() - t0
        if frame["stopReason"] != "end_turn" or "tool_end" not in kinds:
            raise RuntimeError(f"{self.cid}: not a one-tool turn: {kinds} {frame}")
        return took

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()


async def history(db: Path, cid: str) -> list[dict]:
    async with SqliteStore(db) as store:
        return [item.data for item in await store.load_history(OWNER, cid, "model")]


async def bare(client: anthropic.AsyncAnthropic, messages: list[dict], tools: list[dict],
               repeat: int = 3) -> tuple[float, float]:
    """The turn's two model calls on that history (a tool call, then its result), at the
    least a client can spend: bodies encoded beforehand, posted as bytes, the events read as
    JSON. Wall time and CPU seconds of this process, medians of `repeat`."""
    first = [*messages, {"role": "user", "content": [{"type": "text", "text": PROMPT}]}]
    second = [*first, {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_0", "name": "noop",
                                                         "input": {}}]},
              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": "ok"}]}]
    bodies = [json.dumps({"model": MODEL, "max_tokens": 4096, "system": SYSTEM_PROMPT, "tools": tools,
                          "messages": m, "stream": True}).encode() for m in (first, second)]
    walls, cpus = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        for body in bodies:
            async with await client.post("/v1/messages", cast_to=object, content=body, stream=True,
                                         stream_cls=anthropic.AsyncStream[object]) as events:
                async for _event in events:
                    pass
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return median(walls), median(cpus)


NOOP_SCHEMA = {"name": "noop", "description": "Does nothing and returns at once.",
               "input_schema": {"type": "object", "properties": {}}}


async def main_async(args: argparse.Namespace) -> bool:
    fake = FakeAnthropicProcess()
    server = None
    with tempfile.TemporaryDirectory(prefix="bench-turn-cost-") as tmp:
        sockets: list[Socket] = []
        client = None
        try:
            data = Path(tmp) / "data"
            data.mkdir()
            db = data / "chat-agent.db"
            sizes = await seed(db)
            ids = [f"c{n}" for n in range(len(sizes))]
            loads = await load_times(db, ids)
            sent = {cid: await history(db, cid) for cid in ids}
            env = {"BENCH_TOOLS": "noop"}
            if args.profile:
                env["BENCH_PROFILE"] = str(Path(args.profile).resolve())
            server = ChatServer(fake, data, script="bench/bench_server.py", env=env)
            client = anthropic.AsyncAnthropic(api_key=fake.api_key, base_url=fake.base_url, max_retries=0,
                                              http_client=anthropic.DefaultAioHttpClient())
            sockets = [Socket(server.ws_url, cid) for cid in ids]
            for socket in sockets:
                await socket.open()
            times: dict[str, list[float]] = {cid: [] for cid in ids}
            bares: dict[str, list[float]] = {cid: [] for cid in ids}
            bare_cpus: dict[str, list[float]] = {cid: [] for cid in ids}
            cpu: dict[str, float] = {cid: 0.0 for cid in ids}
            print(f"turn cost: {args.blocks} blocks of {args.block} one-tool turns per size after one warm-up "
                  f"block, sizes interleaved; load {os.getloadavg()[0]:.1f}")
            for block in range(args.blocks + 1):
                if block == 1 and args.profile:
                    os.kill(server.pid, signal.SIGUSR1)  # the warm-up is not profiled
                for socket in sockets:
                    c0 = proc_cpu(server.pid)
                    took = [await socket.turn() for _ in range(args.block)]
                    used = proc_cpu(server.pid) - c0
                    b, b_cpu = await bare(client, sent[socket.cid], [NOOP_SCHEMA])
                    if block:
                        times[socket.cid] += took
                        cpu[socket.cid] += used
                        bares[socket.cid].append(b)
                        bare_cpus[socket.cid].append(b_cpu)
            if args.profile:
                os.kill(server.pid, signal.SIGUSR1)
                await asyncio.sleep(1)
            measured = args.blocks * args.block
            base = ids[0]
            p50 = {cid: median(times[cid]) for cid in ids}
            model = {cid: median(bares[cid]) for cid in ids}
            per_turn = {cid: cpu[cid] / measured for cid in ids}
            model_cpu = {cid: median(bare_cpus[cid]) for cid in ids}
            worst = 0.0
            for (name, turns), cid in zip(sizes.items(), ids):
                chars = sum(len(json.dumps(m)) for m in sent[cid])
                load, held_chars = loads[cid]
                held = (p50[cid] - model[cid] + model[base]) / p50[base]
                ratio_cpu = per_turn[cid] / per_turn[base]
                cpu_held = (per_turn[cid] - model_cpu[cid] + model_cpu[base]) / per_turn[base]
                print(f"  {name:16s} ({turns:5d} turns, {held_chars:7,d} chars held, {chars:7,d} JSON chars sent): "
                      f"turn p50 {ms(p50[cid])}, bare two calls p50 {ms(model[cid])}, server CPU/turn "
                      f"{ms(per_turn[cid])} (bare two calls' CPU {ms(model_cpu[cid])}), history load "
                      f"{ms(load)}; vs 10 turns: turn {p50[cid] / p50[base]:.3f} as measured, {held:.3f} model time "
                      f"held; CPU {ratio_cpu:.3f} as measured, {cpu_held:.3f} bare CPU held")
                if cid != base:
                    worst = max(worst, held, cpu_held)
            print(f"  load {os.getloadavg()[0]:.1f}")
            return verdict("turn cost: worst of (turn p50, CPU per turn; the bare calls' held) vs 10 turns",
                           worst / TARGET, 1.0, higher_is_better=False)
        finally:
            for socket in sockets:
                await socket.close()
            if client is not None:
                await client.close()
            if server is not None:
                server.stop()
            fake.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=16)
    parser.add_argument("--block", type=int, default=5)
    parser.add_argument("--profile", help="cProfile the server over the measured blocks into this file")
    args = parser.parse_args()
    return run(main_async, args)


if __name__ == "__main__":
    sys.exit(main())
