"""A seeded scripted model and a small real tool for the simulated instances.

The model is a real `ModelClient`: each call streams text deltas (with pauses), or asks for
the `lookup` tool (safe to repeat) or the `record` tool (not: the checker counts its runs), and ends with a `ModelReply` that holds exactly what it streamed. While
the schedule's model faults are on it may stay silent before answering (the loop's
`waiting_model` status, then its idle timeout), announce a retry, or fail mid-stream. A
message that says `probe` (the checker's last message to every conversation) is answered
at once, with `probe-ok`.
"""

from __future__ import annotations

import asyncio
import json
import random
import zlib
from typing import TYPE_CHECKING, Annotated, Any, AsyncIterator

from langchain_core.tools import BaseTool, InjectedToolArg, tool

from chat_agent.model import LLMError, ModelReply, ModelRequest, Retry, TextDelta, ToolInputDelta
from chat_agent.protocol import Usage
from chat_agent.tooling import ToolContext

if TYPE_CHECKING:
    from tests.sim.run import Simulation

PROBE, PROBE_REPLY = "probe", "probe-ok"
TOOL_STEPS = 2  # tool calls at most in one turn: the model answers in text after that


_lookup: BaseTool | None = None
_record: BaseTool | None = None
# Runs of each `record` call, by the ref its input carries: a continued turn must never run
# one twice. Per process (tools take ~20 ms to make), cleared by each simulation.
RECORDED: dict[str, int] = {}


def lookup_tool() -> BaseTool:
    """One for the process: making a LangChain tool takes ~20 ms, and it holds no state."""
    global _lookup
    if _lookup is None:
        _lookup = _make_lookup()
    return _lookup


def record_tool() -> BaseTool:
    global _record
    if _record is None:
        @tool("record", description="Records something; takes a while, never to be done twice.")
        async def record(ref: str, ctx: Annotated[ToolContext, InjectedToolArg]) -> str:
            RECORDED[ref] = RECORDED.get(ref, 0) + 1
            await asyncio.sleep((zlib.crc32(ref.encode()) % 30) / 10)
            return f"recorded {ref}"
        _record = record
    return _record


def _make_lookup() -> BaseTool:
    @tool("lookup", description="Looks a key up; takes a while.")
    async def lookup(key: str, ctx: Annotated[ToolContext, InjectedToolArg]) -> str:
        # How long it takes follows from the key alone: the schedule picked the key.
        pause = (zlib.crc32(key.encode()) % 40) / 10
        await asyncio.sleep(pause / 2)
        ctx.progress(f"halfway through {key}")
        await asyncio.sleep(pause / 2)
        return f"value of {key}"

    lookup.metadata = {"repeatable": True}
    return lookup


def _last_user_text(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """The last text the user wrote, and how many tool results came after it."""
    results = 0
    for message in reversed(messages):
        if message["role"] != "user":
            continue
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        texts = [b.get("text", "") for b in blocks if b.get("type") == "text"]
        if any(b.get("type") == "tool_result" for b in blocks):
            results += 1
            continue
        return (texts[-1] if texts else ""), results
    return "", results


class SimModel:
    configured = True

    def __init__(self, sim: Simulation, rng: random.Random):
        self._sim = sim
        self._rng = rng
        self._calls = 0

    def unavailable(self, model: str) -> str | None:
        return None

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        rng, sim = self._rng, self._sim
        self._calls += 1
        text, tool_steps = _last_user_text(request.messages)
        usage = Usage(input_tokens=10 + self._calls, output_tokens=5)
        if text.strip() == PROBE:
            await asyncio.sleep(0.05)
            yield TextDelta(PROBE_REPLY)
            yield ModelReply([{"type": "text", "text": PROBE_REPLY}], "end_turn", usage)
            return
        if sim.model_faults():
            roll = rng.random()
            if roll < 0.15:
                await asyncio.sleep(rng.uniform(6.0, 40.0))  # silent: waiting_model, maybe the idle timeout
            elif roll < 0.25:
                delay = rng.uniform(0.5, 4.0)
                yield Retry(attempt=2, attempts=3, reason="is overloaded (529)", delay=delay)
                await asyncio.sleep(delay)
            elif roll < 0.3:
                await asyncio.sleep(rng.uniform(0.01, 1.0))
                raise LLMError("llm_error", "The model API failed (simulated).", retryable=True)
        pieces = [f"w{self._calls}.{i} " for i in range(rng.randint(1, 6))]
        use_tool = tool_steps < TOOL_STEPS and rng.random() < 0.35
        if use_tool and rng.random() < 0.5:
            pieces = pieces[:1]
        elif use_tool:
            pieces = []
        streamed = ""
        for n, piece in enumerate(pieces):
            await asyncio.sleep(rng.uniform(0.005, 0.4) if rng.random() < 0.9 else rng.uniform(1.0, 4.0))
            if n and sim.model_faults() and rng.random() < 0.03:
                raise LLMError("llm_error", "The model API failed mid-stream (simulated).")
            streamed += piece
            yield TextDelta(piece)
        content: list[dict[str, Any]] = [{"type": "text", "text": streamed}] if streamed else []
        if not use_tool:
            yield ModelReply(content or [{"type": "text", "text": "(nothing)"}], "end_turn", usage)
            return
        tool_id = f"toolu_{self._sim.next_tool_id()}"
        if rng.random() < 0.5:
            call = {"type": "tool_use", "id": tool_id, "name": "lookup", "input": {"key": f"k{rng.randint(0, 99)}"}}
        else:
            call = {"type": "tool_use", "id": tool_id, "name": "record", "input": {"ref": tool_id}}
        await asyncio.sleep(rng.uniform(0.01, 0.3))
        yield ToolInputDelta(call["id"], call["name"], json.dumps(call["input"]))
        yield ModelReply([*content, call], "tool_use", usage)

    async def call(self, request: ModelRequest) -> ModelReply:
        """A background call (a title): short, and never one of the faults."""
        await asyncio.sleep(self._rng.uniform(0.05, 0.5))
        return ModelReply([{"type": "text", "text": "Simulated title"}], "end_turn", Usage(input_tokens=5))

    async def complete(self, request: ModelRequest) -> str:
        reply = await self.call(request)
        return reply.content[0]["text"]

    async def close(self) -> None:
        pass
