"""What the offline demo model knows of the canvas: the current artifact, read back from the
history it was sent, and the scripted edits it makes to it.

The demo has no canvas service (a model never has): like a real model it knows the artifact
only from what it wrote (`generate_artifact`, `rewrite_artifact`, `update_artifact` inputs)
and what the turn showed it (`<artifact …>` blocks, `<artifact_edit …>` line diffs, a
highlight's `<excerpt>`). Pure functions, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator

_ARTIFACT = re.compile(r"<artifact (?P<attrs>[^>]*)>\n(?P<content>.*)\n</artifact>\s*$", re.DOTALL)
_EDIT = re.compile(r"<artifact_edit [^>]*>.*?\n(?P<diff>@@.*)</artifact_edit>\s*$", re.DOTALL)
_HUNK = re.compile(r"@@ -(\d+) \+(\d+) @@")
_EXCERPT = re.compile(r"<excerpt>(?P<before>.*)<highlight>(?P<text>.*)</highlight>(?P<after>.*)</excerpt>",
                      re.DOTALL)
_TYPE = re.compile(r'type="(\w+)"')
_LANGUAGE = re.compile(r'language="([^"]*)"')


@dataclass(slots=True)
class Known:
    """The artifact as the model last knew it."""

    content: str
    type: str = "text"
    language: str | None = None


def _blocks(messages: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            yield message["role"], {"type": "text", "text": content}
        elif isinstance(content, list):
            for block in content:
                if isinstance(block, dict):
                    yield message["role"], block


def apply_line_diff(old: str, diff: str) -> str:
    """`old` with a unified-style diff (chat_agent.context.diff) applied."""
    lines, out, at = old.splitlines(keepends=True), [], 0
    for raw in diff.splitlines(keepends=True):
        hunk = _HUNK.match(raw)
        if hunk:
            start = int(hunk[1]) - 1
            out += lines[at:start]
            at = start
        elif raw.startswith((" ", "-")):
            if raw.startswith(" "):
                out.append(lines[at] if at < len(lines) else raw[1:])
            at += 1
        elif raw.startswith("+"):
            out.append(raw[1:])
    return "".join(out + lines[at:])


def current_artifact(messages: list[dict[str, Any]]) -> Known | None:
    """Replays the history's artifact changes in order; None when it holds no artifact."""
    known: Known | None = None
    highlight: tuple[str, str] | None = None  # (before, text) of the last excerpt shown
    for role, block in _blocks(messages):
        kind = block.get("type")
        if role == "assistant" and kind == "tool_use":
            known = _tool_change(known, block.get("name", ""), block.get("input") or {}, highlight)
        elif role == "user" and kind == "text":
            text = block.get("text", "")
            if (match := _ARTIFACT.search(text)) is not None:
                attrs = match["attrs"]
                kind_of = _TYPE.search(attrs)
                language = _LANGUAGE.search(attrs)
                known = Known(match["content"], kind_of[1] if kind_of else "text", language[1] if language else None)
            elif (match := _EDIT.search(text)) is not None and known is not None:
                known.content = apply_line_diff(known.content, match["diff"])
            elif (match := _EXCERPT.search(text)) is not None:
                highlight = (match["before"].lstrip("…"), match["text"])
    return known


def _tool_change(known: Known | None, name: str, data: dict[str, Any],
                 highlight: tuple[str, str] | None) -> Known | None:
    content = data.get("content")
    if name == "generate_artifact" and isinstance(content, str):
        return Known(content, data.get("type") or "text", data.get("language"))
    if name == "rewrite_artifact" and isinstance(content, str):
        base = known or Known(content)
        return Known(content, data.get("type") or base.type, data.get("language") or base.language)
    if name == "update_artifact" and known is not None and isinstance(data.get("replacement"), str):
        target = data.get("target")
        if target:
            known.content = known.content.replace(target, data["replacement"], 1)
        elif highlight is not None:
            before, text = highlight
            at = known.content.find(before + text)
            if at >= 0:
                at += len(before)
                known.content = known.content[:at] + data["replacement"] + known.content[at + len(text):]
    return known


def highlight_of(messages: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(the highlighted text, what the user asked) of a highlight edit's excerpt message."""
    for _, block in _blocks(messages[-1:]):
        text = block.get("text", "") if block.get("type") == "text" else ""
        match = _EXCERPT.search(text)
        if match is not None:
            ask = re.search(r"and asks: (.*?)\n<excerpt>", text, re.DOTALL)
            return match["text"], (ask[1] if ask else "")
    return None


def edit_span(text: str, ask: str) -> str:
    """The demo's replacement for a highlighted passage: a visible, scripted edit."""
    lowered = ask.lower()
    core = text.strip()
    lead, trail = text[:len(text) - len(text.lstrip())], text[len(text.rstrip()):]
    if any(w in lowered for w in ("upper", "shout", "louder", "caps")):
        new = core.upper()
    elif any(w in lowered for w in ("short", "concise", "trim", "cut")):
        words = core.split()
        new = " ".join(words[: max(1, len(words) // 2)]) + ("…" if len(words) > 1 else "")
    elif any(w in lowered for w in ("bold", "emphas", "stronger", "highlight")):
        new = f"**{core}**"
    else:
        new = f"{core} ✨"
    return lead + new + trail


_EMOJI = ("🌱", "✨", "📌", "🚀", "💡", "✅")


def quick_rewrite(known: Known, ask: str) -> tuple[str, str | None]:
    """The demo's rewrite for a quick action (its instructions in `ask`): (content, language)."""
    content, lowered = known.content, ask.lower()
    lines = content.splitlines()
    if known.type == "code":
        comment = "#" if (known.language or "python").lower() in ("python", "ruby", "bash", "shell", "r") else "//"
        if "port" in lowered and (m := re.search(r"into (\w[\w+#]*)", ask)):
            return f"// Ported to {m[1]} by the demo model (a real model rewrites the code).\n{content}", m[1].lower()
        if "log" in lowered:
            return _around_defs(lines, lambda indent, name: f"{indent}    print('entering {name}')"), None
        if "bug" in lowered:
            return f"{comment} Reviewed by the demo model: no bugs found.\n{content}", None
        return _around_defs(lines, lambda indent, name: None, comment), None
    if "emoji" in lowered:
        out = [line + f" {_EMOJI[i % len(_EMOJI)]}" if line.startswith(("#", "- ", "* ")) else line
               for i, line in enumerate(lines)]
        return "\n".join(out) + ("\n" if content.endswith("\n") else ""), None
    if "translate" in lowered:
        language = (m[1] if (m := re.search(r"into ([\w ]+?),", ask)) else "another language")
        return f"> *Demo translation into {language}: a real model translates every line.*\n\n{content}", None
    if "pirate" in lowered:
        return "\n".join(f"{line} Arr!" if line and not line.startswith("#") else line for line in lines), None
    if any(w in lowered for w in ("short", "concise")):
        paragraphs = content.split("\n\n")
        return "\n\n".join(paragraphs[: max(2, len(paragraphs) // 2)]) + "\n", None
    if "long" in lowered:
        return content.rstrip("\n") + "\n\n## More\n\nThe demo model added this section to make the piece longer. " \
                                      "A real model would expand every part in the same voice.\n", None
    return content.rstrip("\n") + f"\n\n> *Edited by the demo model: {ask.strip().splitlines()[0][:160]}*\n", None


def _around_defs(lines: list[str], log_line: Any, comment: str = "#") -> str:
    out: list[str] = []
    for line in lines:
        match = re.match(r"(\s*)(?:async\s+)?(?:def|function)\s+(\w+)", line)
        if match and comment and log_line(match[1], match[2]) is None:
            out.append(f"{match[1]}{comment} {match[2]}: explained by the demo model")
        out.append(line)
        if match and (extra := log_line(match[1], match[2])) is not None:
            out.append(extra)
    return "\n".join(out) + "\n"


_CONCLUDES = re.compile(r"^#+\s*(conclusion|summary|in short|the end)\b", re.IGNORECASE | re.MULTILINE)


def judge(content: str, kind: str) -> dict[str, Any]:
    """The demo reviewer's verdict (`submit_review`'s input) on a version: scripted but
    read from the text, so a review can fail and its revision be seen. A text passes when it
    ends on a conclusion or summary; code and images pass."""
    if kind != "text" or _CONCLUDES.search(content):
        return {"passed": True, "score": 0.9, "suggestions": [],
                "feedback": "(Demo review) It does what was asked; a real reviewer model reads it closely."}
    return {"passed": False, "score": 0.6, "suggestions": ["Add a short conclusion that sums up the key points"],
            "feedback": "(Demo review) The draft stops without a conclusion: the reader is left to sum it up."}


def revise(known: Known, feedback: str) -> str:
    """The revision a failed demo review asks for: the conclusion it missed, made of the
    draft's own key points; other feedback is applied as an edit note."""
    content = known.content.rstrip("\n")
    if "conclusion" not in feedback.lower() or _CONCLUDES.search(content):
        return quick_rewrite(known, feedback.splitlines()[-1] if feedback.strip() else "revise")[0]
    points = [line[2:].strip().rstrip(".") for line in content.splitlines() if line.startswith(("- ", "* "))]
    summary = ("In short: " + "; ".join(p[0].lower() + p[1:] for p in points[:4] if p) + ".") if points else \
        "In short: the draft's points hold together, and the next step is yours."
    return f"{content}\n\n## Conclusion\n\n{summary}\n"
