"""Prompt caching over a 20-turn canvas session, and what a span edit sends.

The real server (`python server.py`, a subprocess) is driven over its WebSocket through a
canvas session scripted on the fake Anthropic API (in this process, so the replies can be
scripted; it models the API's prompt cache: prefix hits at earlier breakpoints within a
20-block lookback, per-model minimum length, the message cache keyed by tool_choice and
thinking). An artifact is generated, then chat turns, the model's targeted updates,
highlight edits, the user's own edits and version selections alternate, so most turns come
right after an artifact change. For every turn, `done.usage` says how the input split:
only `cacheReadTokens` were read from the cache; `cacheWriteTokens` were processed in full
(and billed at 1.25x) to be written, `inputTokens` were not cached at all.
Goal 1: from turn 3 on, every turn reads >= 80% of its input tokens (reads + writes +
uncached) from the cache. A quick action follows, shown but not judged: it forces
rewrite_artifact, and the API keys the message cache by tool_choice.

Then a highlight edit on artifacts of 10k, 100k and 400k characters: the tokens (tiktoken)
of the user message the model gets for the span edit. Goal 2: <= 2,000 whatever the size.

    python bench/canvas_cache.py
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chat_agent.context.tokens import TokenCounter  # noqa: E402
from tests.fakes.anthropic_fake import FakeAnthropic, Reply, Text, ToolUse  # noqa: E402
from tests.support import ServerProcess, connect, send, until  # noqa: E402

SMALL = "claude-haiku-bench"
PARAGRAPH = "The canvas keeps the document beside the chat, and every edit becomes a version. "


def document(chars: int) -> str:
    lines, size, n = [], 0, 0
    while size < chars:
        line = f"## Section {n}\n\n{PARAGRAPH * 4}\n\n"
        lines.append(line)
        size += len(line)
        n += 1
    return "".join(lines)[:chars]


def main_only(body: dict) -> bool:
    return body.get("model") != SMALL


def user_edit(content: str, n: int) -> str:
    """The user's own small edit: one sentence of the current version reworded."""
    at = content.index(PARAGRAPH, (len(content) * (n % 7)) // 8)
    return content[:at] + f"Edited by hand ({n}): the canvas keeps every edit. " + content[at + len(PARAGRAPH):]


def session_script(doc: str) -> list[tuple[str, list, dict]]:
    """(kind, replies, message) per turn: 20 turns of a plausible canvas session, then a quick
    action. "edit": the user edits the artifact by hand before the message; "select": the
    user selects the previous version before it."""
    tool = lambda name, args: [Reply([ToolUse(name, args)]), Reply("Done.")]  # noqa: E731
    turns = [("generate", tool("generate_artifact", {"title": "Guide", "type": "text", "content": doc}),
              {"content": "Write a guide to the canvas."})]
    for i in range(19):
        kind = i % 5
        if kind == 0:
            turns.append(("chat", [Reply(f"Here is a thought about section {i}. " * 5)], {"content": f"What about section {i}?"}))
        elif kind == 1:
            turns.append(("update", tool("update_artifact", {"target": f"## Section {i}\n", "replacement": f"## Part {i}\n"}),
                          {"content": f"Rename section {i}."}))
        elif kind == 2:
            start = doc.index(PARAGRAPH)
            turns.append(("highlight", tool("update_artifact", {"replacement": "The canvas"}),
                          {"content": "Shorter.", "canvas": {"highlight": {"start": start, "end": start + 10}}}))
        elif kind == 3:
            turns.append(("edit", [Reply([Text("Sure.")])], {"content": f"I reworded a line; any tips for part {i}?"}))
        else:
            turns.append(("select", [Reply(f"Section {i} reads well. " * 3)], {"content": "Does it read well now?"}))
    # Shown, not judged: a quick action forces rewrite_artifact, and the API keys the message
    # cache by tool_choice, so its forced call reads no history from the cache; the whole new
    # version it writes is then new input to the reply after it.
    turns.append(("quick", tool("rewrite_artifact", {"content": doc.replace("canvas", "canvas 🎨")}),
                  {"content": "", "canvas": {"quickAction": {"name": "emojis"}}}))
    return turns


async def current_version(server: ServerProcess, conversation_id: str, index: int) -> dict:
    status, version = await asyncio.to_thread(
        server.get, f"/api/conversations/{conversation_id}/artifact/versions/{index}")
    assert status == 200, (status, version)
    return version


def artifact_index(frames: list[dict], index: int) -> int:
    for frame in frames:
        if frame["type"] == "artifact":
            index = frame["artifact"]["currentIndex"]
        elif frame["type"] == "artifact_edit":
            index = frame["index"]
    return index


async def user_change(ws, server: ServerProcess, conversation_id: str, what: str, index: int, n: int) -> int:
    """The user's own change before a turn; the index of the version current after it."""
    if what == "edit":
        version = await current_version(server, conversation_id, index)
        await send(ws, type="edit_artifact", content=user_edit(version["content"], n))
    else:
        await send(ws, type="select_artifact_version", index=index - 1)
    frames = []
    while not frames or frames[-1]["type"] not in ("artifact", "artifact_edit", "error"):
        frames += await until_any(ws, ("artifact", "artifact_edit", "error"))
    assert frames[-1]["type"] != "error", frames[-1]
    return artifact_index(frames, index)


async def until_any(ws, types: tuple[str, ...]) -> list[dict]:
    frames = []
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), 60))
        frames.append(frame)
        if frame["type"] in types:
            return frames


async def run_session(server: ServerProcess, fake: FakeAnthropic, doc: str) -> list[tuple[str, dict]]:
    ws, session = await connect(server, ping_interval=None)  # the fake shares this process: a busy GIL is no dead peer
    conversation_id, index, usages = session["conversationId"], 0, []
    for n, (kind, replies, message) in enumerate(session_script(doc), 1):
        if kind in ("edit", "select"):
            index = await user_change(ws, server, conversation_id, kind, index, n)
        fake.enqueue(*replies, when=main_only)
        await send(ws, type="message", **message)
        frames = await until(ws, "done", timeout=60)
        index = artifact_index(frames, index)
        usages.append((kind, frames[-1]["usage"]))
    await ws.close()
    return usages


async def span_edit_tokens(server: ServerProcess, fake: FakeAnthropic, counter: TokenCounter, chars: int) -> int:
    ws, _ = await connect(server, ping_interval=None)  # the fake shares this process: a busy GIL is no dead peer
    doc = document(chars)
    fake.enqueue(Reply([ToolUse("generate_artifact", {"title": "Big", "type": "text", "content": doc})]),
                 Reply("ok"), when=main_only)
    await send(ws, type="message", content="write it")
    await until(ws, "done", timeout=60)
    start = doc.index(PARAGRAPH, chars // 2)
    fake.enqueue(Reply([ToolUse("update_artifact", {"replacement": "A canvas"})]), Reply("ok"), when=main_only)
    await send(ws, type="message", content="shorter", canvas={"highlight": {"start": start, "end": start + 10}})
    await until(ws, "done", timeout=60)
    edit = [r.body for r in fake.requests if main_only(r.body) and r.body.get("tool_choice")][-1]
    await ws.close()
    return counter.text(json.dumps(edit["messages"][-1], ensure_ascii=False))


async def main() -> int:
    counter = TokenCounter()
    with FakeAnthropic() as fake, tempfile.TemporaryDirectory() as tmp:
        env = {"ANTHROPIC_BASE_URL": fake.base_url, "ANTHROPIC_API_KEY": fake.api_key,
               "CHAT_AGENT_SMALL_MODEL": SMALL, "CHAT_AGENT_LOG_LEVEL": "WARNING"}
        server = ServerProcess(Path(tmp) / "data", env).start()
        try:
            usages = await run_session(server, fake, document(12_000))
            sizes = {chars: await span_edit_tokens(server, fake, counter, chars) for chars in (10_000, 100_000, 400_000)}
        finally:
            server.stop()
    print("turn  kind       input  cacheWrite  cacheRead  read%")
    shares = []
    for n, (kind, u) in enumerate(usages, 1):
        total = u["inputTokens"] + u["cacheWriteTokens"] + u["cacheReadTokens"]
        read = u["cacheReadTokens"] / total if total else 0.0
        if n >= 3 and kind != "quick":
            shares.append(read)
        print(f"{n:4}  {kind:9}  {u['inputTokens']:5}  {u['cacheWriteTokens']:10}  {u['cacheReadTokens']:9}  {read:6.1%}"
              + ("  (not judged: a forced tool_choice reads no message from the cache)" if kind == "quick" else ""))
    worst = min(shares)
    print(f"\nfrom turn 3: worst share of input read from cache {worst:.1%} (goal >= 80%): "
          f"ratio {worst:.3f} (target >= 0.8) {'PASS' if worst >= 0.8 else 'FAIL'}")
    for chars, tokens in sizes.items():
        print(f"span edit on a {chars:,}-character artifact: {tokens:,} tokens of artifact context")
    biggest = max(sizes.values())
    print(f"span edit context: at most {biggest:,} tokens (goal <= 2,000): ratio {biggest / 2000:.2f} "
          f"{'PASS' if biggest <= 2000 else 'FAIL'}")
    return 0 if worst >= 0.8 and biggest <= 2000 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
