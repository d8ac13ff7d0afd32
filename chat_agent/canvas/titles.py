"""A conversation's title, from its first exchange, by the small model.

The model answers through a forced tool, so there is no preamble ("Here is a title: ...")
to strip; `clean_title` still tidies what models like to add (quotes, a final period,
markdown) and enforces 2 to 5 words.

Word counting splits on spaces, so a title in a language written without them (Chinese,
Japanese, Thai) is one "word": a one-word title is therefore kept when it has at least
`MIN_SINGLE_CHARS` letters or digits ("Kubernetes", "量子计算入门") and is not a
placeholder such as "Untitled" or "Chat"; anything shorter or emptier is None.
"""

from __future__ import annotations

import re

from chat_agent.model import ModelClient, ModelRequest

TOOL_NAME = "set_title"
MAX_WORDS = 5
MAX_CHARS = 60
MIN_SINGLE_CHARS = 3
EXCHANGE_CHARS = 2_000  # of each side: the opening of a message says what it is about

SYSTEM_PROMPT = """You name conversations for the list of chats in a writing and coding app. Read the user's first message and the assistant's reply, and call set_title with a title of 2 to 5 words that says what the conversation is about: its topic or goal. Use the user's language and natural wording, like a document title; no quotes, no final punctuation, no filler such as "Chat about" or "Discussion of"."""

TOOL = {
    "name": TOOL_NAME,
    "description": "Set the conversation's title.",
    "input_schema": {
        "type": "object",
        "properties": {"title": {"type": "string", "description": "2 to 5 words, no quotes or final punctuation."}},
        "required": ["title"],
    },
}

_EDGE = "\"'`“”‘’„«»「」『』*~ "  # not "#" on the right: "Learning C#"
_TRAILING = ".,;:!?…。、，；：！？-–— "
_PREFIX = re.compile(r"^\s*title\s*[:：]\s*", re.IGNORECASE)
_PLACEHOLDERS = frozenset({"untitled", "title", "chat", "conversation", "new chat", "new conversation",
                           "none", "null", "n/a", "unknown", "no title"})
# Words a cut title should not end on ("Planning a Trip to the" → "Planning a Trip").
_DANGLING = frozenset({"a", "an", "the", "and", "or", "of", "to", "for", "with", "in", "on", "at", "by", "from"})


async def make_title(model: ModelClient, *, model_name: str, user_text: str, reply_text: str) -> str | None:
    """A cleaned title, or None when the model gave nothing usable. LLMError propagates."""
    exchange = (f"<user>\n{_clip(user_text)}\n</user>\n\n<assistant>\n{_clip(reply_text)}\n</assistant>\n\n"
                f"Call {TOOL_NAME} with the conversation's title.")
    request = ModelRequest(
        model=model_name,
        max_tokens=100,
        system=SYSTEM_PROMPT,
        messages=[{"role": "user", "content": exchange}],
        tools=[TOOL],
        tool_choice={"type": "tool", "name": TOOL_NAME},
    )
    reply = await model.call(request)
    for block in reply.content:
        if block.get("type") == "tool_use" and block.get("name") == TOOL_NAME:
            title = (block.get("input") or {}).get("title")
            return clean_title(title) if isinstance(title, str) else None
    return None


def clean_title(raw: str) -> str | None:
    """The title tidied to 2-5 words and at most MAX_CHARS characters, or None (see the module doc)."""
    title = _PREFIX.sub("", " ".join(raw.split()))
    title = _trim(title)
    words = title.split()
    if len(words) > MAX_WORDS:
        words = words[:MAX_WORDS]
        while len(words) > 2 and words[-1].lower().strip(_TRAILING) in _DANGLING:
            words.pop()
        title = _trim(" ".join(words))
    if len(title) > MAX_CHARS:
        cut = title[:MAX_CHARS]
        title = _trim(cut[: cut.rindex(" ")] if " " in cut else cut)
    if title.lower() in _PLACEHOLDERS:
        return None
    if len(title.split()) < 2 and sum(c.isalnum() for c in title) < MIN_SINGLE_CHARS:
        return None
    return title or None


def _trim(title: str) -> str:
    """Strips wrapping quotes, markdown emphasis and heading marks, and final punctuation."""
    previous = None
    while previous != title:
        previous = title
        title = title.strip(_EDGE).lstrip("#").rstrip(_TRAILING)
    return title


def _clip(text: str) -> str:
    text = text.strip() or "(empty)"
    return text if len(text) <= EXCHANGE_CHARS else text[:EXCHANGE_CHARS] + " […]"
