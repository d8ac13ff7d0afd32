"""Long conversations written straight into a store with its own write ops, as the server
would have left them after many turns: for tests and benchmarks that need a 100- or
1,000-turn conversation without running that many turns.

Each turn is a user message and a reply that called a tool (text, a tool card with its
input and output, more text), at sizes a real chat has, or with `tools=False` a short
exchange of text alone (as simple turns through the fake model leave). The rows are those
the server writes: each message names its parent and the conversation its leaf; the
model-facing history holds the same exchange as API messages, each item naming the message
it belongs to, summarized the way ConversationManager does once it passes `summary_chars`
(a summary item replaces the older part, about a quarter is kept verbatim; the items it
replaces stay stored, as the server leaves them).
"""

from __future__ import annotations

import random
import sqlite3
from typing import Any

from chat_agent.context.summary import summary_message
from chat_agent.context.tokens import content_chars
from chat_agent.protocol import TextPart, ToolPart, VisibleMessage
from chat_agent.store import (AppendHistory, CreateConversation, HistoryItem, SetContextOverhead, SetLeaf,
                              Store)
from chat_agent.store.tree import ROOT

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


def _item(item_id: str, data: dict[str, Any], chars: int, **tree: Any) -> HistoryItem:
    return HistoryItem(id=item_id, data=data, tokens=max(1, chars // 4), chars=chars, **tree)


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
    model = [_item(f"h{n:06d}{i}", m, content_chars(m["content"]), node=user.id if i == 0 else reply.id)
             for i, m in enumerate(model_messages)]
    return visible, model


def simple_turn(rng: random.Random, n: int, at: float) -> tuple[list[HistoryItem], list[HistoryItem]]:
    """One short turn of text alone: its two visible and two model-facing messages."""
    question = f"Question {n}: " + prose(rng, rng.randint(20, 80))
    answer = f"Answer {n}: " + prose(rng, rng.randint(60, 200))
    user = VisibleMessage(id=f"msg_u{n:06d}", role="user", created_at=at, parts=[TextPart(text=question)])
    reply = VisibleMessage(id=f"msg_a{n:06d}", role="assistant", created_at=at + 1, parts=[TextPart(text=answer)])
    visible = [_item(m.id, m.model_dump(mode="json", exclude_none=True), len(m.content)) for m in (user, reply)]
    model = [_item(f"h{n:06d}{i}", {"role": role, "content": [{"type": "text", "text": text}]}, len(text),
                   node=message.id)
             for i, (role, text, message) in enumerate((("user", question, user), ("assistant", answer, reply)))]
    return visible, model


def _summarized(model: list[HistoryItem], summary_chars: int, item_id: str) -> tuple[HistoryItem, list[HistoryItem]]:
    """What a summary leaves: a summary in front of the newest quarter, cut at a user turn
    (the summary item, and the model-facing history it leaves)."""
    keep, kept = summary_chars // 4, 0
    cut = len(model)
    while cut > 0 and kept < keep:
        cut -= 1
        kept += model[cut].chars
    while cut < len(model) and not _opens_turn(model[cut].data):  # never between a tool call and its result
        cut += 1
    replaced, rest = model[:cut], model[cut:]
    head = summary_message(f"Summary of {cut // 4} earlier turns about trips and bakeries.",
                           rest[0].data if rest else None)
    if rest and rest[0].data["role"] == "user":  # merged into the summary's message
        replaced, rest = [*replaced, rest[0]], rest[1:]
    first = _item(item_id, head, content_chars(head["content"]), supersedes=tuple(item.id for item in replaced),
                  node=next((item.node for item in reversed(replaced) if item.node is not None), None), base=True)
    return first, [first, *rest]


def _opens_turn(message: dict[str, Any]) -> bool:
    return message["role"] == "user" and message["content"][0]["type"] == "text"


async def seed_conversation(store: Store, owner: str, conversation_id: str, turns: int, *, created_at: float,
                            seed: int = 0, tools: bool = True, summary_chars: int = SUMMARY_CHARS) -> None:
    """A conversation of `turns` finished turns, committed to `store`."""
    rng = random.Random(seed)
    visible: list[HistoryItem] = []
    written: list[HistoryItem] = []  # every model-facing item, in the order the server appends them
    model: list[HistoryItem] = []  # the model-facing history
    for n in range(turns):
        shown, said = (turn if tools else simple_turn)(rng, n, created_at + n * 60)
        for message in shown:
            message.parent_id = visible[-1].id if visible else ROOT
            visible.append(message)
        written += said
        model += said
        if sum(item.chars for item in model) > summary_chars:
            summary, model = _summarized(model, summary_chars, f"s{len(written):06d}")
            written.append(summary)
    await store.apply([CreateConversation(owner, conversation_id, created_at),
                       SetContextOverhead(owner, conversation_id, 3_000)])
    for history, items in (("visible", visible), ("model", written)):
        for start in range(0, len(items), 500):  # a few statements, not one huge one
            await store.apply([AppendHistory(owner, conversation_id, history, tuple(items[start:start + 500]))])
    if visible:
        await store.apply([SetLeaf(owner, conversation_id, visible[-1].id)])


def copy_conversation(conn: sqlite3.Connection, source: str, target: str, later: float = 0.0) -> None:
    """Another conversation with `source`'s rows (`later` seconds newer), in SQL: a bench's
    thousand copies of one seeded conversation in a fraction of the time."""
    conn.execute("INSERT INTO conversations (id, owner, title, created_at, updated_at, last_seq, context_overhead,"
                 " leaf_id) SELECT ?, owner, title, created_at + ?, updated_at + ?, last_seq, context_overhead, leaf_id"
                 " FROM conversations WHERE id = ?", (target, later, later, source))
    conn.execute("INSERT INTO history_items (conversation_id, history, pos, id, data, tokens, chars, parent_id, role,"
                 " node, supersedes, base) SELECT ?, history, pos, id, data, tokens, chars, parent_id, role, node,"
                 " supersedes, base FROM history_items WHERE conversation_id = ?", (target, source))
