"""Review latency: what a passing review adds to a turn, as a ratio to the same turn without one.

The real server (`server.py`) runs as a child process against the fake Anthropic API in its
own process. Each round sends the same turn twice on a new conversation, in alternating
order: the model writes an artifact (`generate_artifact`, one model call) and closes with a
sentence (a second call); once with `settings.review` off, once on (`maxRevisions: 0`), where
the reviewer (the small model; the fake passes the result) is one more call before `done`.
Timed from sending `message` to receiving `done`. Checked: the reviewed turn has exactly one
`review`, passed, and the other none.

Target: median(reviewed) / median(plain) ≤ 2.0: a passing review costs about one model call
more, and the plain turn is already two.

    python bench/review_latency.py [--rounds 40]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ChatServer, FakeAnthropicProcess, median, ms, pct, recv_json, run, verdict, ws_connect  # noqa: E402

TARGET = 2.0
PROMPT = '[[tool generate_artifact {"title": "Tides", "type": "text", "content": "Tides rise and fall twice a day."}]]'


async def one_turn(url: str, reviewed: bool) -> float:
    ws = await ws_connect(url)
    try:
        await recv_json(ws)  # session
        review = {"enabled": True, "maxRevisions": 0} if reviewed else {"enabled": False}
        started = time.perf_counter()
        await ws.send(json.dumps({"type": "message", "content": PROMPT, "settings": {"review": review}}))
        reviews = []
        while True:
            frame = await recv_json(ws)
            if frame["type"] == "review":
                reviews.append(frame)
            if frame["type"] == "done":
                took = time.perf_counter() - started
                break
        if frame["stopReason"] != "end_turn":
            raise RuntimeError(f"the turn ended with {frame['stopReason']!r}")
        if reviewed != bool(reviews) or any(not r["passed"] for r in reviews) or len(reviews) > 1:
            raise RuntimeError(f"reviewed={reviewed} but reviews: {reviews}")
        return took
    finally:
        await ws.close()


async def main(args: argparse.Namespace) -> bool:
    fake = FakeAnthropicProcess()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            server = ChatServer(fake, Path(tmp) / "data")
            try:
                for reviewed in (False, True):  # warm-up: imports, the first connection, the store
                    await one_turn(server.ws_url, reviewed)
                plain: list[float] = []
                reviewed_turns: list[float] = []
                for n in range(args.rounds):
                    order = (False, True) if n % 2 == 0 else (True, False)
                    for reviewed in order:
                        (reviewed_turns if reviewed else plain).append(await one_turn(server.ws_url, reviewed))
            finally:
                server.stop()
    finally:
        fake.stop()
    print(f"turn without review: median {ms(median(plain))}, p90 {ms(pct(plain, 90))}")
    print(f"turn with a passing review: median {ms(median(reviewed_turns))}, p90 {ms(pct(reviewed_turns, 90))}")
    print(f"extra latency of the review: {ms(median(reviewed_turns) - median(plain))} (median)")
    return verdict("reviewed / plain turn, medians", median(reviewed_turns) / median(plain), TARGET,
                   higher_is_better=False)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40)
    sys.exit(run(main, parser.parse_args()))
