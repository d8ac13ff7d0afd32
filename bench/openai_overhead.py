"""The OpenAI-compatible path's overhead per one-tool turn (ours - the openai SDK called
directly), against the Anthropic path's (ours - the anthropic SDK) in the same run.

A turn: the user asks, the model (the fake Chat Completions API in its own process,
instant) answers with a call to `noop`, the tool returns at once, the model answers with a
short text. Interleaved in a random order each iteration:

- bare: the same two streamed calls made with the openai SDK (`chat.completions.create(
        stream=True, stream_options=...)`, chunks read to the end), with the very parameters
        ours sends (system prompt, tool schema, messages);
- ours: `chat_agent.agent.loop.run_turn` in-process through `model_client(settings)` (the
        router and the OpenAI-compatible client), with a `ConversationManager` on a real
        `StoreWriter` and SQLite store, the writer flushed at the end (as bench/turn_overhead.py).

- bare/anthropic and ours/anthropic: the same turn on the fake Anthropic API (its own
        process), as bench/turn_overhead.py's bare/aio and ours (the same HTTP client).

Overhead = what our code adds to a turn: ours - bare, the median of each iteration's paired
difference (the difference of the medians is printed beside it). Judging ours/bare hid it:
the two model calls dominate a turn, so 1.5× allowed tens of milliseconds of ours. Target:
the OpenAI path's overhead ≤ 1.5× the Anthropic path's (the loop, the history and the store
are the same; only the adapter differs), ratio = overhead(OpenAI) / overhead(Anthropic).
A failed turn is counted and its iteration left out; more than 1% failing fails the run.

    python bench/openai_overhead.py [--iterations 200] [--warmup 20]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PY, Child, Errors, FakeAnthropicProcess, load_note, median, ms, pct, run, verdict  # noqa: E402
from turn_overhead import PROMPT, Ours  # noqa: E402
from turn_overhead import Bare as BareAnthropic  # noqa: E402

import openai  # noqa: E402

from chat_agent.config import Settings  # noqa: E402
from chat_agent.context.prompts import SYSTEM_PROMPT  # noqa: E402
from chat_agent.model import ModelRequest, model_client  # noqa: E402
from chat_agent.model.openai_messages import chat_params  # noqa: E402

TARGET = 1.5
MODEL = "bench-model"
KEY = "sk-test-openai-0123456789"  # the fake's


class FakeOpenAIProcess(Child):
    def __init__(self) -> None:
        super().__init__([PY, "-m", "tests.fakes.openai_fake"], capture_stdout=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().strip()
        if not line.startswith("http"):
            self.stop()
            raise RuntimeError(f"fake OpenAI did not start: {line!r}")
        self.base_url = line
        self.api_key = KEY


class OursOnOpenAI(Ours):
    def __init__(self, fake: FakeOpenAIProcess, data_dir: Path):
        super().__init__(fake, data_dir)  # type: ignore[arg-type]  (only its base_url and key are read)
        self.settings = Settings(openai_api_key=KEY, openai_base_url=fake.base_url, model=f"openai:{MODEL}",
                                 small_model=f"openai:{MODEL}", data_dir=data_dir, llm_max_retries=0)

    async def open(self) -> None:
        await super().open()
        await self.model.close()
        self.model = model_client(self.settings)
        self.agent.model = self.model


class Bare:
    def __init__(self, fake: FakeOpenAIProcess, tools: list[dict]):
        self.client = openai.AsyncOpenAI(api_key=KEY, base_url=fake.base_url, max_retries=0)
        self.tools = tools

    async def _call(self, messages: list[dict]) -> tuple[str, list[dict]]:
        params = chat_params(ModelRequest(model=MODEL, messages=messages, max_tokens=Settings().max_output_tokens,
                                          system=SYSTEM_PROMPT, tools=self.tools))
        text, calls = "", {}
        stream = await self.client.chat.completions.create(**params, stream=True, stream_options={"include_usage": True})
        async with stream:
            async for chunk in stream:
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    for piece in choice.delta.tool_calls or []:
                        call = calls.setdefault(piece.index, {"id": piece.id, "name": "", "args": ""})
                        call["name"] += (piece.function.name or "") if piece.function else ""
                        call["args"] += (piece.function.arguments or "") if piece.function else ""
        return text, list(calls.values())

    async def turn(self) -> str:
        messages = [{"role": "user", "content": [{"type": "text", "text": PROMPT}]}]
        text, calls = await self._call(messages)
        call = calls[0]
        messages += [{"role": "assistant", "content": [{"type": "text", "text": text}, {
                         "type": "tool_use", "id": call["id"], "name": call["name"], "input": {}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "ok"}]}]
        return (await self._call(messages))[0]


async def main_async(args: argparse.Namespace) -> bool:
    fake = FakeOpenAIProcess()
    fake_anthropic = FakeAnthropicProcess()
    tmp = tempfile.TemporaryDirectory(prefix="bench-openai-")
    (Path(tmp.name) / "anthropic").mkdir()
    (Path(tmp.name) / "openai").mkdir()
    ours = OursOnOpenAI(fake, Path(tmp.name) / "openai")
    ours_a = Ours(fake_anthropic, Path(tmp.name) / "anthropic")
    bare_a = None
    try:
        await ours.open()
        await ours_a.open()
        bare = Bare(fake, ours.tools)
        bare_a = BareAnthropic(fake_anthropic, ours_a.tools, aiohttp=True)
        for name, runner in (("ours", ours), ("ours/anthropic", ours_a)):
            conv, turn = await runner.prepare()
            events = await runner.turn(conv, turn)
            if [type(e).__name__ for e in events].count("ToolEnded") != 1 or events[-1].stop_reason != "end_turn":
                raise RuntimeError(f"{name} did not make a one-tool turn: {events}")
        for name, client in (("bare", bare), ("bare/anthropic", bare_a)):
            if not (await client.turn()).startswith("Done: ok"):
                raise RuntimeError(f"{name} did not make a one-tool turn")

        async def timed_ours(runner: Ours) -> float:
            conv, turn = await runner.prepare()
            t0 = time.perf_counter()
            await runner.turn(conv, turn)
            return time.perf_counter() - t0

        async def timed_bare(client: Bare | BareAnthropic) -> float:
            t0 = time.perf_counter()
            await client.turn()
            return time.perf_counter() - t0

        variants = {"bare": lambda: timed_bare(bare), "ours": lambda: timed_ours(ours),
                    "bare/anthropic": lambda: timed_bare(bare_a), "ours/anthropic": lambda: timed_ours(ours_a)}
        times: dict[str, list[float]] = {name: [] for name in variants}
        errors = Errors()
        rng = random.Random(1)
        for i in range(args.warmup + args.iterations):
            order = list(variants)
            rng.shuffle(order)
            try:
                sample = {name: await variants[name]() for name in order}
            except Exception as exc:
                errors.add(exc)
                continue
            if i >= args.warmup:
                for name, took in sample.items():
                    times[name].append(took)
        for name, values in times.items():
            print(f"  {name:14s} median {ms(median(values))}  p10 {ms(pct(values, 10))}  p90 {ms(pct(values, 90))}")
        over = {}
        for api, (o, b) in {"OpenAI": ("ours", "bare"), "Anthropic": ("ours/anthropic", "bare/anthropic")}.items():
            over[api] = median([x - y for x, y in zip(times[o], times[b])])
            print(f"  overhead per one-tool turn on {api:9s}: {ms(over[api])} (median of paired differences; "
                  f"median - median {ms(median(times[o]) - median(times[b]))}; {over[api] / median(times[b]):.0%} "
                  f"of bare)")
        print(f"  {errors.report(args.warmup + args.iterations)}; {load_note()}")
        ok = len(errors) <= (args.warmup + args.iterations) // 100
        return verdict("overhead on an OpenAI-compatible API / overhead on Anthropic", over["OpenAI"] / over["Anthropic"],
                       TARGET, higher_is_better=False) and ok
    finally:
        await ours.close()
        await ours_a.close()
        if bare_a is not None:
            await bare_a.close()
        fake.stop()
        fake_anthropic.stop()
        tmp.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    return run(main_async, parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
