"""What a request carries besides the history: the system prompt, the artifact as the model
sees it, and the prompt-cache breakpoints.

The stable prefix (tools, standing instructions, the user's memories) and the history up to
the newest message carry `cache_control` breakpoints, four at most as the API allows, so
each call after the first reads nearly all of its input from the cache.
"""

from __future__ import annotations

import json
from typing import Any

from chat_agent.context.diff import line_diff
from chat_agent.protocol import Highlight
from chat_agent.store import ArtifactVersionRecord

CACHE = {"type": "ephemeral"}
EXCERPT_CHARS = 500  # context either side of a highlight the model sees for a span edit

CANVAS_INSTRUCTIONS = """You work beside a canvas holding one artifact: a markdown document or a program the user is writing with you.
- Write substantial content the user will keep (an essay, a post, a plan, code) into the canvas with generate_artifact, not into the chat.
- Change it with update_artifact for targeted edits (exact target text and its replacement) and with rewrite_artifact for changes that touch most of it. When it changes other than by your own edits, you are shown its current version, or how it differs from the version you saw.
- Keep chat replies short when the canvas holds the work: say what you did and what the user might do next.
- Record durable facts about the user and their style preferences with reflect, sparingly."""


def system_blocks(base: str, *, prefix: bool, memories: str | None) -> list[dict[str, Any]]:
    """The system prompt as blocks: standing instructions, then the memories, each cached."""
    text = f"{base}\n\n{CANVAS_INSTRUCTIONS}" if prefix else base
    blocks = [{"type": "text", "text": text, "cache_control": CACHE}]
    if memories:
        blocks.append({"type": "text", "text": memories, "cache_control": CACHE})
    return blocks


def cached_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not tools:
        return tools
    return [*tools[:-1], {**tools[-1], "cache_control": CACHE}]


def with_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy whose last block carries a breakpoint: the next call reads all of this from cache."""
    if not messages:
        return messages
    last = messages[-1]
    content = last["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    if not blocks or blocks[-1].get("type") in ("thinking", "redacted_thinking"):
        return messages
    blocks[-1] = {**blocks[-1], "cache_control": CACHE}
    return [*messages[:-1], {**last, "content": blocks}]


def _attributes(version: ArtifactVersionRecord) -> str:
    attrs = f'title={json.dumps(version.title, ensure_ascii=False)} type="{version.type}" version="{version.index}"'
    return attrs + (f' language="{version.language}"' if version.language else "")


def artifact_block(version: ArtifactVersionRecord) -> dict[str, Any]:
    return {"type": "text", "text": f"<artifact {_attributes(version)}>\n{version.content}\n</artifact>"}


def artifact_edit_block(seen: tuple[int, str], version: ArtifactVersionRecord) -> dict[str, Any] | None:
    """The change from the version the model saw (index, content) to `version`, as a line
    diff; None when the diff is not much smaller than the version itself (show it whole)."""
    base, old = seen
    diff = line_diff(old, version.content)
    if len(diff) * 2 > len(version.content):
        return None
    change = (f"Version {version.index} is version {base}, which you saw, with these changes (a line diff: "
              "` ` unchanged, `-` removed, `+` added):\n" + diff) if diff else \
        f"Version {version.index} has the same content as version {base}, which you saw."
    return {"type": "text", "text": (f"<artifact_edit {_attributes(version)} base_version=\"{base}\">\n"
                                     f"The artifact changed since you last saw it. {change}</artifact_edit>")}


def highlight_block(version: ArtifactVersionRecord, highlight: Highlight, request: str) -> dict[str, Any]:
    """Only the highlight and a window around it: a span edit costs the same on any artifact."""
    content = version.content
    start, end = highlight.start, highlight.end
    before = content[max(0, start - EXCERPT_CHARS):start]
    after = content[end:end + EXCERPT_CHARS]
    return {"type": "text", "text": (
        f"The user highlighted a passage of the artifact ({_attributes(version)}) and asks: {request}\n"
        f"<excerpt>{'…' if start > EXCERPT_CHARS else ''}{before}<highlight>{content[start:end]}</highlight>"
        f"{after}{'…' if end + EXCERPT_CHARS < len(content) else ''}</excerpt>\n"
        "Call update_artifact with only the new text for the highlighted passage as `replacement` (no "
        "`target`): it replaces exactly the highlight, so it must fit between the text before and after it.")}
