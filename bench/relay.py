"""Frame relay under load: ours vs a bare relay, 50 and 200 sessions, burst and paced upstream.

Both servers are child processes served by uvicorn the same way (per-message-deflate off),
send the same request (system prompt and tools; see bare_relay.py) and stream the same fake
Anthropic reply (`[[long WORDS]]`: ~9 characters a word in 40-character
text deltas) from the same fake, which runs in its own process. The same client code drives
both: N `websockets` connections, one warm-up turn each, then one timed turn each, all
sessions at once. Upstream is either a burst (the fake sends every delta at once, as the API
does when it has the text ready) or paced (`[[slow S]]`: a fixed gap between SSE events, as
a model generating). Both merge the deltas of each ~50 ms into one `content_chunk` with the
same code (chat_agent/sessions/coalesce.py), write from one task per socket and let other
streams in every 1 ms (`model/fair.py`): the bare relay is the floor of a relay at our
cadence. Ours also stores every frame before sending it and adds its other frames;
throughput is the reply TEXT delivered per second, and the benchmark checks both delivered
the same text. A turn that fails (an `error` frame, a timeout) is counted, printed, and
left out of the figures.

Each load runs --rounds times (7), bare and ours alternating which goes first; every round's
ratios are printed, and the median of the rounds' ratios is judged: on two cores shared by
the fake, the server and 50-200 clients, one round's first-text ratio swings from 0.6 to 2
from one run to the next with no change to either server.

Judged for each load, ours/bare (medians over sessions, then over rounds):
- first text: time from sending a message to its first text frame (target ≤ 1.1);
- throughput: reply characters delivered per second, wall clock from the first message sent
  to the last `done` (target ≥ 0.8);
- half text: time from sending a message until half of its reply's text has arrived: a
  reply that piles up at the end of its turn shows here (target ≤ 1.2).
Also reported: frames sent, the share of the text that arrived in the last 100 ms of its
turn, and server, fake and client CPU.

    python bench/relay.py [--sessions 50,200] [--words 2000] [--paced-ms 2] [--rounds 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (BareRelay, ChatServer, Child, FakeAnthropicProcess, drive, judge_rounds,  # noqa: E402
                     load_note, run)

THROUGHPUT, FIRST, HALF = 0.8, 1.1, 1.2
EVENTS_PER_SLOW = 46  # the fake spreads `[[slow S]]` over this many event gaps (tests/fakes)


def report(name: str, r: dict) -> None:
    print(f"    {name:4s} {r['throughput'] / 1000:7.1f} k chars/s ({r['text_frames']} text frames, {r['frames']} in all, "
          f"{r['elapsed']:.2f} s); first text {r['first'] * 1000:6.0f} ms, half text {r['half'] * 1000:6.0f} ms, "
          f"text in last 100 ms {r['late']:.0%}; CPU server {r['server_cpu']:.1f} s, fake {r['fake_cpu']:.1f} s, "
          f"client {r['client_cpu']:.1f} s; {r['errors'].report()}")


async def main_async(args: argparse.Namespace) -> bool:
    fake = FakeAnthropicProcess()
    loads = [(n, mode) for n in args.sessions for mode in args.modes]
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench-relay-") as tmp:
        servers: dict[str, Child] = {}
        try:
            servers["bare"] = BareRelay(fake, Path(tmp) / "bare.log")
            servers["ours"] = ChatServer(fake, Path(tmp) / "ours")
            print(f"relay: [[long {args.words}]] per session, paced = {args.paced_ms} ms between SSE events "
                  f"(fake pid {fake.pid}, bare pid {servers['bare'].pid}, ours pid {servers['ours'].pid}, "
                  f"{load_note()})")
            for i, (sessions, mode) in enumerate(loads):
                words = args.words if sessions <= 50 else args.words // 4  # keep 200 sessions under a minute
                content = f"[[long {words}]]"
                if mode == "paced":
                    content += f" [[slow {args.paced_ms / 1000 * EVENTS_PER_SLOW:g}]]"
                print(f"  {sessions} sessions, {mode} upstream, [[long {words}]]:")
                rounds = []
                for r in range(args.rounds):
                    results = {}
                    first = (i + r) % 2 == 0
                    for name in (("bare", "ours") if first else ("ours", "bare")):  # alternate, so drift hits both
                        server = servers[name]
                        results[name] = await drive([server.ws_url], [server.pid], fake.pid, sessions, content,
                                                      name == "ours")
                        report(f"{name} ({r + 1})", results[name])
                    if same_text(results["bare"], results["ours"]) and few_errors(results, sessions):
                        rounds.append(ratios(results["bare"], results["ours"]))
                    else:
                        ok = False
                ok = judge(rounds, f"{sessions} {mode}") and ok
        finally:
            for server in servers.values():
                server.stop()
            fake.stop()
    return ok


def same_text(bare: dict, ours: dict) -> bool:
    """Whether every session of both got the same reply (the round is not judged otherwise)."""
    if bare["per_session"] != ours["per_session"] or len(bare["per_session"]) != 1:
        print(f"    MISMATCH: reply characters per session bare {bare['per_session']} vs ours {ours['per_session']}")
        return False
    return True


def few_errors(results: dict[str, dict], sessions: int) -> bool:
    """Whether both ran (nearly) every session: a round where one lost many of its sockets
    compares a light load with a full one, and is not judged."""
    failed = {name: len(r["errors"]) for name, r in results.items() if len(r["errors"]) > sessions // 100}
    if failed:
        print(f"    NOT JUDGED: too many failed sessions ({', '.join(f'{k} {v}' for k, v in failed.items())})")
    return not failed


def ratios(bare: dict, ours: dict) -> dict[str, float]:
    return {"throughput": ours["throughput"] / bare["throughput"], "first": ours["first"] / bare["first"],
            "half": ours["half"] / bare["half"]}


def judge(rounds: list[dict[str, float]], load: str) -> bool:
    return judge_rounds(rounds, load, (("first", "first-text p50 ours/bare", FIRST, False),
                                       ("throughput", "throughput ours/bare", THROUGHPUT, True),
                                       ("half", "half-text p50 ours/bare", HALF, False)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=lambda s: [int(n) for n in s.split(",")], default=[50, 200])
    parser.add_argument("--words", type=int, default=2000)
    parser.add_argument("--modes", type=lambda s: s.split(","), default=["burst", "paced"])
    parser.add_argument("--paced-ms", type=float, default=2.0, help="gap between SSE events when paced")
    parser.add_argument("--rounds", type=int, default=7, help="runs of each load; their median ratio is judged")
    args = parser.parse_args()
    return run(main_async, args, fds=65536)


if __name__ == "__main__":
    sys.exit(main())
