"""What streaming a tool call's input costs the server, against streaming the same text as a reply.

A canvas turn writes its artifact as a tool call (`generate_artifact`): the model streams the
call's JSON in pieces of 1-16 characters (the fake cuts it as the API does), and the server
shows the `content` field as it grows and keeps the whole call for the tool. The same
characters streamed as reply text come in pieces of 40 (`[[long]]`). The real server
(`server.py`, a child process) and the fake Anthropic API (its own process): one socket, one
conversation per turn, turns one after another; the server's CPU per turn (psutil) for a
generated artifact of SIZE characters, and for a text reply of as many characters (cut at the
output limit, 8,192 tokens, past ~30,000), alternating, --turns of each per size after one
warm-up turn each. Judged at the largest size, the means of the turns (psutil counts CPU in
10 ms ticks): artifact CPU per character shown / text CPU per character shown (target <= 3.5:
the artifact arrives in ~4.7x as many events, 8.5 characters each against 40, and the SDK
parses each one's SSE alike).

    python bench/tool_input.py [--sizes 10000,100000] [--turns 7]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (ChatServer, Errors, FakeAnthropicProcess, load_note, open_session,  # noqa: E402
                     proc_cpu, recv_json, run, send_message, verdict)

TARGET = 3.5
WORD = "lorem "  # 6 characters: the artifact's content and the reply's words are of a size


def artifact_message(size: int) -> str:
    content = (WORD * (size // len(WORD) + 1))[:size]
    call = {"title": "Bench", "type": "text", "content": content}
    return f"[[tool generate_artifact {json.dumps(call)}]]"


def text_message(size: int) -> str:
    return f"[[long {size // 9}]]"  # `wordN ` is ~9 characters for the sizes here


async def turn(url: str, pid: int, content: str) -> tuple[float, int]:
    """One turn on a new conversation: the server's CPU from `message` to `done`, and the
    characters streamed to the client (content and artifact chunks)."""
    ws = await open_session(url)
    try:
        cpu0 = proc_cpu(pid)
        await ws.send(send_message(content))
        chars = 0
        while True:
            frame = await recv_json(ws, 120)
            if frame["type"] in ("content_chunk", "artifact_chunk"):
                chars += len(frame.get("content", ""))
            elif frame["type"] == "error":
                raise RuntimeError(f"error frame: {frame}")
            elif frame["type"] == "done":
                if frame.get("stopReason") not in ("end_turn", "tool_use", "max_tokens"):
                    raise RuntimeError(f"turn ended with {frame.get('stopReason')}")
                return proc_cpu(pid) - cpu0, chars
    finally:
        await ws.close()


async def main_async(args: argparse.Namespace) -> bool:
    fake = FakeAnthropicProcess()
    errors = Errors()
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench-tool-input-") as tmp:
        server = None
        try:
            server = ChatServer(fake, Path(tmp) / "ours")
            print(f"tool_input: sizes {args.sizes}, {args.turns} turns each (server pid {server.pid}, {load_note()})", flush=True)
            ratio = None
            for size in args.sizes:
                kinds = {"artifact": artifact_message(size), "text": text_message(size)}
                cpu: dict[str, list[float]] = {k: [] for k in kinds}
                streamed: dict[str, int] = {}
                for n in range(args.turns + 1):
                    for kind, content in kinds.items():
                        result = errors.keep([await _guarded(turn(server.ws_url, server.pid, content))], kind)
                        if result and n:  # the first of each is warm-up
                            cpu[kind].append(result[0][0])
                            streamed[kind] = result[0][1]
                if not cpu["artifact"] or not cpu["text"]:
                    print(f"  {size} characters: no turn of each kind went through; {errors.report()}")
                    return False
                # Per character shown: a text reply past the output limit stops there (max_tokens).
                # Summed over the turns: psutil counts CPU in 10 ms ticks, a text turn's whole.
                a, t = sum(cpu["artifact"]) / len(cpu["artifact"]), sum(cpu["text"]) / len(cpu["text"])
                a_per, t_per = a / streamed["artifact"] * 1000, t / streamed["text"] * 1000
                print(f"  {size:7d} characters: artifact turn {a * 1000:7.1f} ms CPU (mean) ({streamed['artifact']} "
                      f"characters shown, {a_per * 1000:.2f} ms per 1,000), text turn {t * 1000:7.1f} ms "
                      f"({streamed['text']} shown, {t_per * 1000:.2f} ms per 1,000): {a_per / t_per:.2f}x")
                ratio = a_per / t_per
            print(f"  {errors.report()}")
            ok = ratio is not None and verdict("artifact / text CPU per character at the largest size", ratio, TARGET,
                                               higher_is_better=False)
            ok = ok and not len(errors)
        finally:
            if server is not None:
                server.stop()
            fake.stop()
    return ok


async def _guarded(coro):
    try:
        return await coro
    except Exception as exc:  # counted, not fatal
        return exc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=lambda s: [int(n) for n in s.split(",")], default=[10_000, 100_000])
    parser.add_argument("--turns", type=int, default=7)
    return run(main_async, parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
