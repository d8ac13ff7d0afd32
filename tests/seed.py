"""Long conversations written straight into a store with its own write ops, as the server
would have left them after many turns: for tests and benchmarks that need a 100- or
1,000-turn conversation without running that many turns.

Each turn is a user message and a reply that called a tool (text, a tool card with its
input and output, more text), at sizes a real chat has, or with `tools=False` a short
exchange of text alone (as simple turns through the fake model leave). The model-facing
history holds the same exchange as API messages, summarized the way ConversationManager
does once it passes `summary_chars` (the older part becomes a summary, about a quarter is
kept verbatim).
"""

from __future__ import annotations

import random
from typing import Any

from chat_agent.context.summary import summary_message
from chat_agent.context.tokens import content_chars
from chat_agent.protocol import TextPart, ToolPart, VisibleMessage
from chat_agent.store import (AppendHistory, CreateConversation, HistoryItem, ReplaceHistory, SetContextOverhead,
                              Store)

WORDS = ("the quick brown fox jumps over a lazy dog while planning its next trip to Lyon with a map of old "
         "streets and a list of bakeries worth a detour before noon").split()
SUMMARY_CHARS = 300_000  # the server's default threshold


def prose(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:chars]


def _item(item_id: str, data: dict[str, Any], chars: int) -> HistoryItem:
    return HistoryItem(id=item_id, data=data, tokens=max(1, chars // 4), chars=chars)


def turn(rng: random.Random, n: int, at: float) -> tuple[list[HistoryItem], list[HistoryItem]]:
    """One turn: its two visible messages and its four model-facing messages."""
    question = f"Question {n}: " + prose(rng, rng.randint(120, 400))
    query = prose(rng, rng.randint(20, 60))
    result = prose(rng, rng.randint(1_000, 2_000))
    before, after = prose(rng, rng.randint(100, 300)), f"Answer {n}: " + prose(rng, rng.randint(300, 900))
    tool_id = f"toolu_{n:06d}"
    user = VisibleMessage(id=f"msg_u{n:06d}", role="user", created_at=at, parts=[TextPart(text=question)])
    reply = VisibleMessage(id=f"msg_a{n:06d}", role="assistant", created_at=at + 1, parts=[
        TextPart(text=before),
        ToolPart(tool_id=tool_id, name="web_search", input={"query": query}, output=result, is_error=False,
                 duration=1.2),
        TextPart(text=after)])
    visible = [_item(m.id, m.model_dump(mode="json", exclude_none=True), len(m.content)) for m in (user, reply)]
    model_messages = [
        {"role": "user", "content": [{"type": "text", "text": question}]},
        {"role": "assistant", "content": [{"type": "text", "text": before},
                                          {"type": "tool_use", "id": tool_id, "name": "web_search",
                                           "input": {"query": query}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": result}]},
        {"role": "assistant", "content": [{"type": "text", "text": after}]},
    ]
    model = [_item(f"h{n:06d}{i}", m, content_chars(m["content"])) for i, m in enumerate(model_messages)]
    return visible, model


def simple_turn(rng: random.Random, n: int, at: float) -> tuple[list[HistoryItem], list[HistoryItem]]:
    """One short turn of text alone: its two visible and two model-facing messages."""
    question = f"Question {n}: " + prose(rng, rng.randint(20, 80))
    answer = f"Answer {n}: " + prose(rng, rng.randint(60, 200))
    user = VisibleMessage(id=f"msg_u{n:06d}", role="user", created_at=at, parts=[TextPart(text=question)])
    reply = VisibleMessage(id=f"msg_a{n:06d}", role="assistant", created_at=at + 1, parts=[TextPart(text=answer)])
    visible = [_item(m.id, m.model_dump(mode="json", exclude_none=True), len(m.content)) for m in (user, reply)]
    model = [_item(f"h{n:06d}{i}", {"role": role, "content": [{"type": "text", "text": text}]}, len(text))
             for i, (role, text) in enumerate((("user", question), ("assistant", answer)))]
    return visible, model


def _summarized(model: list[HistoryItem], summary_chars: int) -> list[HistoryItem]:
    """What a summary leaves: a summary in front of the newest quarter, cut at a user turn."""
    keep, kept = summary_chars // 4, 0
    cut = len(model)
    while cut > 0 and kept < keep:
        cut -= 1
        kept += model[cut].chars
    while cut < len(model) and not _opens_turn(model[cut].data):  # never between a tool call and its result
        cut += 1
    rest = model[cut:]
    head = summary_message(f"Summary of {cut // 4} earlier turns about trips and bakeries.",
                           rest[0].data if rest else None)
    first = _item(f"s{len(model):06d}", head, content_chars(head["content"]))
    return [first, *rest[1:]] if rest and rest[0].data["role"] == "user" else [first, *rest]


def _opens_turn(message: dict[str, Any]) -> bool:
    return message["role"] == "user" and message["content"][0]["type"] == "text"


async def seed_conversation(store: Store, owner: str, conversation_id: str, turns: int, *, created_at: float,
                            seed: int = 0, tools: bool = True, summary_chars: int = SUMMARY_CHARS) -> None:
    """A conversation of `turns` finished turns, committed to `store`."""
    rng = random.Random(seed)
    visible: list[HistoryItem] = []
    model: list[HistoryItem] = []
    for n in range(turns):
        shown, said = (turn if tools else simple_turn)(rng, n, created_at + n * 60)
        visible += shown
        model += said
        if sum(item.chars for item in model) > summary_chars:
            model = _summarized(model, summary_chars)
    await store.apply([CreateConversation(owner, conversation_id, created_at),
                       SetContextOverhead(owner, conversation_id, 3_000)])
    for start in range(0, len(visible), 500):  # a few statements, not one huge one
        await store.apply([AppendHistory(owner, conversation_id, "visible", tuple(visible[start:start + 500]))])
    await store.apply([ReplaceHistory(owner, conversation_id, "model", tuple(model))])
