"""The background reflection: the small model rewrites a user's memories from a conversation.

One call with a forced tool, so the answer is structured data, never prose to parse. The
caller decides when (after a turn that changed the artifact, debounced) and stores the
result with `MemoryBook.replace`.
"""

from __future__ import annotations

from typing import Any

from chat_agent.model import ModelClient, ModelRequest
from chat_agent.canvas.memory import MAX_CHARS, MAX_ITEMS, clean_item, dedupe_items, validate_memories
from chat_agent.protocol import VisibleMessage
from chat_agent.store import MemoriesRecord

TOOL_NAME = "store_reflections"
MAX_TOKENS = 8192  # the full lists, rewritten: up to 2 × 40 items of up to 400 characters
ARTIFACT_CHARS = 20_000

SYSTEM_PROMPT = """You keep the long-term memory of one user of a canvas app, where they write documents and code with an AI assistant. The memory makes future conversations fit the user without them repeating themselves. It has two lists:

- styleRules: how the user wants things written or coded, in general: tone, length, structure, formatting, language and spelling, vocabulary, naming and code conventions. Phrase each as an instruction to the assistant ("Use British spelling.").
- content: durable facts about the user: who they are, what they work on, their goals, interests, background and audience. Phrase each as a statement about the user ("Writes release notes for a mobile banking app.").

Read the current memory, the conversation and the artifact, then call store_reflections with the complete new lists:
- Keep entries that still hold, revise those the conversation contradicts or sharpens, add what is new at the end of the list.
- Record only what will still matter in later conversations. A one-off request about the piece at hand ("shorten the second paragraph") or the topic of a single task is not a memory.
- Every entry needs evidence: something the user said or did, or an entry already in memory. Do not guess. The user's own edits and corrections are the strongest evidence of their style.
- No duplicates or overlapping entries: merge them. One idea per entry, one concise sentence, at most {max_chars} characters; at most {max_items} entries per list.
- Write entries in the language the user writes in.
- If nothing durable is new, return the current lists unchanged."""

TOOL = {
    "name": TOOL_NAME,
    "description": "Store the user's complete, updated memory: every style rule and fact to keep.",
    "input_schema": {
        "type": "object",
        "properties": {
            "styleRules": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Every style rule to keep, old and new.",
            },
            "content": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Every fact about the user to keep, old and new.",
            },
        },
        "required": ["styleRules", "content"],
    },
}


def transcript_for_reflection(messages: list[VisibleMessage], limit_chars: int = 20_000) -> str:
    """The conversation as role-labelled text; when it is too long, the newest part is kept
    (the message that no longer fits keeps its end, where replies conclude)."""
    parts: list[str] = []
    budget = limit_chars
    for message in reversed(messages):
        body = _body(message)
        if not body:
            continue
        label = f"{message.role.upper()}: "
        if len(label) + len(body) > budget:
            room = budget - len(label) - len(_CUT) - len(_OMITTED) - 2
            if room >= 100:  # only a piece worth reading
                parts.append(label + _CUT + body[-room:])
            parts.append(_OMITTED)
            break
        parts.append(label + body)
        budget -= len(label) + len(body) + 2  # the blank line between messages
    return "\n\n".join(reversed(parts))


_CUT = "[…] "
_OMITTED = "[… earlier messages omitted …]"


def _body(message: VisibleMessage) -> str:
    body = message.content.strip()
    tools = ", ".join(dict.fromkeys(call.name for call in message.tool_calls))
    if tools:
        body += f"\n[used tools: {tools}]"
    if message.status == "aborted":
        body += "\n[stopped by the user]"
    return body.strip()


async def reflect(
    model: ModelClient, *, model_name: str, memories: MemoriesRecord, transcript: str, artifact: str | None,
    max_items: int = MAX_ITEMS, max_chars: int = MAX_CHARS,
) -> tuple[list[str], list[str]] | None:
    """The new (styleRules, content), or None when the reply is unusable: no tool call,
    malformed input, cut off by max_tokens, or both lists empty (a reflection never wipes
    a memory; DELETE /api/memories does). LLMError propagates: the caller logs it."""
    request = ModelRequest(
        model=model_name,
        max_tokens=MAX_TOKENS,
        system=SYSTEM_PROMPT.format(max_items=max_items, max_chars=max_chars),
        messages=[{"role": "user", "content": _prompt(memories, transcript, artifact)}],
        tools=[TOOL],
        tool_choice={"type": "tool", "name": TOOL_NAME},
    )
    reply = await model.call(request)
    if reply.stop_reason == "max_tokens":
        return None  # a list cut short would silently forget what did not fit
    calls = [b.get("input") for b in reply.content if b.get("type") == "tool_use" and b.get("name") == TOOL_NAME]
    data = calls[0] if calls else None
    if not isinstance(data, dict):
        return None
    rules = _usable(data.get("styleRules"), max_items, max_chars)
    facts = _usable(data.get("content"), max_items, max_chars)
    if rules is None or facts is None or not (rules or facts):
        return None
    return validate_memories(rules, facts, max_items=max_items, max_chars=max_chars)


def _usable(value: Any, max_items: int, max_chars: int) -> list[str] | None:
    """The model's list made valid: non-strings, empties and repeats dropped, long items
    shortened at a word, the last `max_items` kept (the prompt asks for new entries at the end)."""
    if not isinstance(value, list):
        return None
    items = [_shorten(clean_item(v), max_chars) for v in value if isinstance(v, str)]
    return dedupe_items(items)[-max_items:]


def _shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut[limit // 2:]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,;:-") + "…"


def _prompt(memories: MemoriesRecord, transcript: str, artifact: str | None) -> str:
    if artifact and artifact.strip():
        shown = artifact if len(artifact) <= ARTIFACT_CHARS else artifact[:ARTIFACT_CHARS] + "\n[… rest omitted …]"
        artifact_part = f"<artifact>\n{shown}\n</artifact>"
    else:
        artifact_part = "<artifact>(none)</artifact>"
    memory = "\n".join(["<memory>", _listing("styleRules", memories.style_rules),
                         _listing("content", memories.content), "</memory>"])
    return "\n\n".join([
        memory,
        artifact_part,
        f"<conversation>\n{transcript.strip() or '(empty)'}\n</conversation>",
        f"Update the memory: call {TOOL_NAME} with the complete new lists.",
    ])


def _listing(tag: str, items: list[str]) -> str:
    lines = "\n".join(f"- {item}" for item in items) or "(none yet)"
    return f"<{tag}>\n{lines}\n</{tag}>"
