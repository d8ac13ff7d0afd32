"""A model call as the loop watches it (`agent/waiting.py`): what arrives in a burst is
handed up in a few pieces, deltas of one kind joined, nothing lost, reordered or joined
across kinds or tool calls."""

from __future__ import annotations

from contextlib import aclosing
from typing import AsyncIterator

from chat_agent.agent.waiting import watched
from chat_agent.model import ModelReply, StreamItem, TextDelta, ThinkingDelta, ToolInputDelta
from chat_agent.protocol import Usage

BURST: list[StreamItem] = [
    *(ThinkingDelta(f"t{i} ") for i in range(50)),
    *(TextDelta(f"w{i} ") for i in range(300)),
    *(ToolInputDelta("call_a", "generate_artifact", f'{{"p{i}": ' if i == 0 else f"{i}, ") for i in range(40)),
    *(ToolInputDelta("call_b", "web_search", f"q{i}") for i in range(40)),
    TextDelta("after"),
    ModelReply([{"type": "text", "text": "the reply"}], "end_turn", Usage()),
]


async def burst() -> AsyncIterator[StreamItem]:
    for item in BURST:  # all of it buffered: never awaits, as a stream with a whole reply read
        yield item


def signature(items: list[object]) -> list[tuple[object, ...]]:
    """Each run of same-kind deltas (one tool call's input) as one entry with its whole text."""
    runs: list[tuple[object, ...]] = []
    for item in items:
        match item:
            case TextDelta(text=text) | ThinkingDelta(text=text):
                key: tuple[object, ...] = (type(item),)
            case ToolInputDelta(tool_id=tool_id, name=name, piece=text):
                key = (ToolInputDelta, tool_id, name)
            case _:
                runs.append((item,))
                continue
        if runs and runs[-1][:-1] == key:
            runs[-1] = (*key, runs[-1][-1] + text)
        else:
            runs.append((*key, text))
    return runs


async def test_a_burst_is_handed_up_joined_in_order_and_whole():
    async with aclosing(watched(burst(), every=60, idle=60)) as items:
        got = [item async for item in items]
    assert signature(got) == signature(BURST)
    assert len(got) < len(BURST) / 10, f"{len(got)} items for {len(BURST)} in a burst"
    assert got[-1] is BURST[-1]
    tool_inputs = [i for i in got if isinstance(i, ToolInputDelta)]
    assert {i.tool_id for i in tool_inputs} == {"call_a", "call_b"}
    assert all(i.name == ("generate_artifact" if i.tool_id == "call_a" else "web_search") for i in tool_inputs)
