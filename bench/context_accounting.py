"""Context accounting per turn on a 300k-character history loaded from the store.

A conversation with ~300,000 characters of model-facing history (user messages, replies
with tool calls, tool results, answers) is written to a SQLite store in a temp dir and
loaded back the way a turn does (`load_history` of the model-facing history, as
`ConversationManager.load` reads it at a turn's start, into a manager with a real `StoreWriter`). Then, for each measured turn, on a
manager holding exactly that history (rebuilt from the loaded items between turns, not
timed), the ConversationManager work of one one-tool turn is timed, in the order
chat_agent/sessions/live.py and chat_agent/agent/loop.py do it:

    add_visible(user)  add_user(content)  needs_summary()          # LiveConversation.start, loop
    add_assistant(reply with tool_use, usage)  tokens               # _keep_reply, ContextChanged
    add_tool_results([...])  needs_summary()                        # _run_tools, next step
    add_assistant(answer, usage)  tokens                            # _keep_reply, ContextChanged
    replace_visible(reply)                                          # LiveConversation.finish

The new content per turn is fixed (user 200 chars, tool result 3,000, answer 1,500, by
default) and is what tiktoken has to count; the point is that nothing scales with the
300k characters already there. The store writer's commit runs in the background and is
reported separately. Target: ≤ 1 ms per turn (median); the ratio is median / 1 ms.

    python bench/context_accounting.py [--turns 300] [--history-chars 300000] [--tool-chars 3000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import median, ms, pct, run, verdict  # noqa: E402

from chat_agent.config import Settings  # noqa: E402
from chat_agent.context.conversation import ConversationManager  # noqa: E402
from chat_agent.protocol import Usage as TokenUsage  # noqa: E402
from chat_agent.protocol import TextPart, VisibleMessage  # noqa: E402
from chat_agent.store import AppendHistory, CreateConversation, HistoryItem, SqliteStore  # noqa: E402
from chat_agent.context.summary import plan_summary  # noqa: E402
from chat_agent.context.tokens import TokenCounter, content_chars  # noqa: E402
from chat_agent.store.writer import StoreWriter  # noqa: E402

TARGET_S = 0.001
WEB_SEARCH_CHARS = 15_000  # tools/web_search.py: 5 results x TEXT_CHARS 3,000
OWNER = "bench"
WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches "
         "near the old harbour as prices rise 3.5% in 2024 according to https://example.com/report ").split()


def prose(chars: int, seed: int) -> str:
    out, n, i = [], 0, seed
    while n < chars:
        word = WORDS[i % len(WORDS)] + (str(i % 97) if i % 11 == 0 else "")
        out.append(word)
        n += len(word) + 1
        i += 7
    return " ".join(out)[:chars]


class TurnContent:
    """What one one-tool turn adds, made once (so every measured turn counts the same text)."""

    def __init__(self, args: argparse.Namespace, n: int):
        self.user = prose(args.user_chars, n)
        self.tool_input = {"query": prose(60, n + 1)}
        self.tool_result = prose(args.tool_chars, n + 2)
        self.answer = prose(args.answer_chars, n + 3)

    def blocks(self, tool_id: str) -> tuple[list, list, list, list]:
        user = [{"type": "text", "text": self.user}]
        call = [{"type": "text", "text": "Let me look that up."},
                {"type": "tool_use", "id": tool_id, "name": "web_search", "input": self.tool_input}]
        results = [{"type": "tool_result", "tool_use_id": tool_id, "content": self.tool_result}]
        answer = [{"type": "text", "text": self.answer}]
        return user, call, results, answer


def visible(role: str, content: str, n: int) -> VisibleMessage:
    return VisibleMessage(id=f"msg_{uuid.uuid4().hex[:20]}", role=role, content=content, created_at=1.7e9 + n)


async def build_history(store: SqliteStore, counter: TokenCounter, args: argparse.Namespace, cid: str) -> int:
    """Writes turns until the model-facing history holds `history_chars`; returns the turns."""
    model_items, visible_items, chars, n = [], [], 0, 0
    while chars < args.history_chars:
        content = TurnContent(args, n)
        tool_id = f"toolu_{n:022d}"
        for role, blocks in zip(("user", "assistant", "user", "assistant"), content.blocks(tool_id)):
            message = {"role": role, "content": blocks}
            item = HistoryItem(uuid.uuid4().hex[:16], message, counter.message(message), content_chars(blocks))
            model_items.append(item)
            chars += item.chars
        for role, text in (("user", content.user), ("assistant", content.answer)):
            v = visible(role, text, n)
            visible_items.append(HistoryItem(v.id, v.model_dump(mode="json", exclude_none=True), 0, len(text)))
        n += 1
    await store.apply([CreateConversation(OWNER, cid, time.time()),
                       AppendHistory(OWNER, cid, "model", tuple(model_items)),
                       AppendHistory(OWNER, cid, "visible", tuple(visible_items))])
    return n


def one_turn(conv: ConversationManager, content: TurnContent, usage_in: int, n: int) -> dict[str, float]:
    """The ConversationManager's part of one one-tool turn; returns seconds per step."""
    user, call, results, answer = content.blocks(f"toolu_bench{n:016d}")
    user_msg = visible("user", content.user, n)
    reply = visible("assistant", "", n)
    clock = time.perf_counter
    t = [clock()]
    conv.add_visible(user_msg)
    conv.add_user(user)
    conv.needs_summary()
    t.append(clock())
    conv.add_assistant(call, TokenUsage(input_tokens=usage_in, output_tokens=60))
    _ = conv.tokens, conv.max_tokens
    t.append(clock())
    conv.add_tool_results(results)
    conv.needs_summary()
    t.append(clock())
    conv.add_assistant(answer, TokenUsage(input_tokens=usage_in + 900, output_tokens=400))
    _ = conv.tokens, conv.max_tokens
    t.append(clock())
    reply.parts = [TextPart(text=content.answer)]  # content is derived from parts
    conv.replace_visible(reply)
    t.append(clock())
    names = ("user message + check", "reply with tool_use", "tool results + check", "answer", "replace_visible")
    return {name: t[i + 1] - t[i] for i, name in enumerate(names)} | {"total": t[-1] - t[0]}


async def main_async(args: argparse.Namespace) -> bool:
    settings = Settings()
    counter = TokenCounter()
    with tempfile.TemporaryDirectory(prefix="bench-context-") as tmp:
        store = SqliteStore(Path(tmp) / "bench.db")
        await store.open()
        writer = StoreWriter(store)
        writer.start()
        try:
            cid = uuid.uuid4().hex
            turns = await build_history(store, counter, args, cid)
            t0 = time.perf_counter()
            loaded_visible = await store.load_history(OWNER, cid, "visible")
            loaded_model = await store.load_history(OWNER, cid, "model")
            t_load = time.perf_counter() - t0

            def manager() -> ConversationManager:
                return ConversationManager(OWNER, cid, model=loaded_model, counter=counter,
                                           writer=writer, summary_chars=settings.summary_chars,
                                           max_tokens=settings.max_context_tokens)

            t0 = time.perf_counter()
            conv = manager()
            t_build = time.perf_counter() - t0
            history_chars, history_tokens = conv.chars, conv.tokens
            t0 = time.perf_counter()
            plan_summary(conv.messages, keep_chars=settings.summary_chars // 4)
            t_plan = time.perf_counter() - t0

            async def measure(content: TurnContent, turns: int) -> tuple[list[dict[str, float]], list[float], int]:
                steps: list[dict[str, float]] = []
                flushes: list[float] = []
                for n in range(args.warmup + turns):
                    conv = manager()  # exactly the loaded history, every turn
                    result = one_turn(conv, content, history_tokens, n)
                    t0 = time.perf_counter()
                    await writer.flush()  # the store writer's commit, off the turn's path
                    flushes.append(time.perf_counter() - t0)
                    if n >= args.warmup:
                        steps.append(result)
                return steps, flushes, conv.chars - history_chars

            content = TurnContent(args, 10_000)
            steps, flushes, new_chars = await measure(content, args.turns)
            big_args = argparse.Namespace(**{**vars(args), "tool_chars": WEB_SEARCH_CHARS})
            big_steps, _, _ = await measure(TurnContent(big_args, 20_000), max(20, args.turns // 5))
        finally:
            await writer.close()
            await store.close()

    totals = [s["total"] for s in steps]
    print(f"context accounting: history of {history_chars:,} chars ({len(loaded_model)} model messages, "
          f"{len(loaded_visible)} visible, {turns} turns, ~{history_tokens:,} tokens) loaded from SQLite")
    print(f"  load both histories {ms(t_load)}, build the ConversationManager {ms(t_build)} (the model-facing "
          f"history is read once per turn, when it starts); plan_summary on it {ms(t_plan)} (only when a summary runs)")
    print(f"  per turn, {args.turns} turns after {args.warmup} warm-up, each adding {new_chars:,} chars "
          f"(user {args.user_chars}, tool result {args.tool_chars}, answer {args.answer_chars}):")
    for name in steps[0]:
        values = [s[name] for s in steps]
        print(f"    {name:22s} median {ms(median(values))}  p90 {ms(pct(values, 90))}")
    token_cost = median([_count_cost(counter, content) for _ in range(50)])
    print(f"  of which tiktoken counting the new user message and tool result: {ms(token_cost)}")
    print(f"  store writer commit of the turn's history (background): median {ms(median(flushes))}")
    big = median([s["total"] for s in big_steps])
    print(f"  for comparison, with a web_search-sized tool result ({WEB_SEARCH_CHARS:,} chars: 5 results x 3,000): "
          f"median {ms(big)} per turn" + ("  <- over the 1 ms budget (tiktoken)" if big > TARGET_S else ""))
    return verdict("context accounting per turn / 1 ms", median(totals) / TARGET_S, 1.0, higher_is_better=False)


def _count_cost(counter: TokenCounter, content: TurnContent) -> float:
    user, _, results, _ = content.blocks("toolu_x")
    t0 = time.perf_counter()
    counter.content(user)
    counter.content(results)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--history-chars", type=int, default=300_000)
    parser.add_argument("--user-chars", type=int, default=200)
    parser.add_argument("--tool-chars", type=int, default=3_000)
    parser.add_argument("--answer-chars", type=int, default=1_500)
    args = parser.parse_args()
    return run(main_async, args)


if __name__ == "__main__":
    sys.exit(main())
