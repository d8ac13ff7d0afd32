"""The offline demo model: `python server.py --demo` with no API key.

It speaks the ModelClient interface with Anthropic-shaped content blocks, so everything above
it (the loop, tools, canvas, titles, summaries) runs for real; only the words are scripted. A
first message shows a plan (`update_plan`), searches the web (on canned results when no
search service is configured), drafts an artifact in the canvas and says how to go on; forced tool calls (a highlight
edit's `update_artifact`, a quick action's `rewrite_artifact`, a title's `set_title`) are
honoured as a real model must.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, AsyncIterator

from chat_agent.config import Settings
from chat_agent.ids import new_id
from chat_agent.model.demo_canvas import current_artifact, edit_span, highlight_of, quick_rewrite
from chat_agent.model.types import ModelReply, ModelRequest, StreamItem, TextDelta, ThinkingDelta, ToolInputDelta
from chat_agent.protocol import Usage

MODEL_NAME = "demo"
NOTICE = ("Demo mode: replies come from a scripted offline model, not a real one (web search answers with "
          "canned results). Set ANTHROPIC_API_KEY and start without --demo for real answers.")

_CODE_WORDS = ("code", "python", "script", "function", "program", "javascript", "typescript", "class ")
_SEARCH_WORDS = ("search", "find", "latest", "news", "look up", "research", "sources")
_WRITE_WORDS = ("write", "draft", "create", "make", "plan", "essay", "poem", "post", "story", "list", "outline")


def _words(text: str, n: int) -> str:
    return " ".join(re.sub(r"[^\w\s'-]", " ", text).split()[:n])


def _title(text: str) -> str:
    words = [w for w in _words(text, 12).split() if w.lower() not in
             {"a", "an", "the", "me", "please", "write", "draft", "create", "make", "about", "on", "for", "some"}]
    return " ".join(w.capitalize() for w in words[:4]) or "Demo Draft"


def _user_text(block_list: Any) -> str:
    if isinstance(block_list, str):
        return block_list
    return "\n".join(b.get("text", "") for b in block_list or [] if isinstance(b, dict) and b.get("type") == "text"
                     and not b.get("text", "").startswith(("<artifact", "[Attached")))


def _tool_results(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(tool name, result text) of the calls the last message answers, when it answers any."""
    if len(messages) < 2 or not isinstance(messages[-1].get("content"), list):
        return []
    names = {b["id"]: b["name"] for b in messages[-2].get("content", []) if isinstance(b, dict)
             and b.get("type") == "tool_use"}
    out = []
    for block in messages[-1]["content"]:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            content = block.get("content")
            text = content if isinstance(content, str) else " ".join(
                c.get("text", "") for c in content or [] if isinstance(c, dict))
            out.append((names.get(block.get("tool_use_id"), ""), text))
    return out


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message["role"] == "user":
            text = _user_text(message["content"])
            if text.strip():
                return text.strip()
    return ""


class DemoModel:
    """A ModelClient whose replies are scripted from the request (see the module doc).
    `pace` is seconds between streamed pieces: slow enough to watch, fast enough to try."""

    configured = True

    def __init__(self, pace: float = 0.02):
        self.pace = pace

    async def close(self) -> None:
        pass

    def unavailable(self, model: str) -> str | None:
        return None  # offline: always there

    async def call(self, request: ModelRequest) -> ModelReply:
        return self._reply(self._plan(request), request)

    async def complete(self, request: ModelRequest) -> str:
        text = _last_user_text(request.messages)
        return f"(Demo summary) The conversation so far: {_words(text, 60)}"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        blocks = self._plan(request)
        for block in blocks:
            if block["type"] == "thinking":
                for piece in _pieces(block["thinking"], 4):
                    yield ThinkingDelta(piece)
                    await asyncio.sleep(self.pace)
            elif block["type"] == "text":
                for piece in _pieces(block["text"], 3):
                    yield TextDelta(piece)
                    await asyncio.sleep(self.pace)
            elif block["type"] == "tool_use":
                for piece in _json_pieces(block["input"]):
                    yield ToolInputDelta(block["id"], block["name"], piece)
                    await asyncio.sleep(self.pace)
        yield self._reply(blocks, request)

    # ---- the script ----------------------------------------------------------------------

    def _reply(self, blocks: list[dict[str, Any]], request: ModelRequest) -> ModelReply:
        written = sum(len(json.dumps(b)) for b in blocks)
        read = len(json.dumps(request.messages)) + len(json.dumps(request.system or "")) + len(json.dumps(request.tools))
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        return ModelReply(blocks, stop, Usage(input_tokens=read // 4, output_tokens=max(1, written // 4)))

    def _plan(self, request: ModelRequest) -> list[dict[str, Any]]:
        forced = (request.tool_choice or {}).get("name") if (request.tool_choice or {}).get("type") == "tool" else None
        if forced:
            return [_call(forced, self._forced_input(forced, request))]
        offered = {t.get("name") for t in request.tools}
        results = _tool_results(request.messages)
        ask = _last_user_text(request.messages)
        blocks: list[dict[str, Any]] = []
        if request.thinking_budget and not results:
            blocks.append({"type": "thinking", "signature": "demo", "thinking": (
                f"The user asks: “{_words(ask, 25)}”. I am the demo model, so I follow my script: "
                "search if I can, then draft in the canvas.")})
        return blocks + self._next_step(request, offered, results, ask)

    def _next_step(self, request: ModelRequest, offered: set[Any], results: list[tuple[str, str]],
                   ask: str) -> list[dict[str, Any]]:
        lowered = ask.lower()
        done = {name for name, _ in results}
        known = current_artifact(request.messages)
        planned = "update_plan" in _turn_calls(request.messages)  # this turn keeps a plan (see _PLAN)
        if "web_search" in done:
            found = dict(results)["web_search"]
            sources = len(re.findall(r"^\[\d+\] ", found, re.MULTILINE))
            if "generate_artifact" in offered and (known is None or any(w in lowered for w in _WRITE_WORDS)):
                return [_text(f"I found {sources} sources. Drafting it in the canvas now."),
                        *([_plan_call(1)] if planned else []), _call("generate_artifact", _draft(ask, found))]
            return [_text(f"Here is what the search found ({sources} sources):\n\n"
                          + _source_list(found))]
        if "generate_artifact" in done and planned:
            return [_plan_call(len(_PLAN))]  # every step ticked off; the closing words follow
        if done == {"update_plan"} and "generate_artifact" in _turn_calls(request.messages):
            done = {"generate_artifact"}
        if "update_artifact" in done:
            return [_text("Changed the passage you selected; the rest of the draft is as it was. Switch versions "
                          "above the canvas to compare.")]
        if "rewrite_artifact" in done:
            return [_text("Rewrote the draft as asked: it is a new version in the canvas.")]
        if "generate_artifact" in done:
            return [_text("Done: the draft is in the canvas on the right. Try selecting a passage and asking "
                          "for a change, or one of the quick actions above it (emojis, length, reading level). "
                          "*This reply comes from the offline demo model.*")]
        if results:
            return [_text("The tool has answered; that is all the demo model has scripted for it.")]
        if (known is None and {"update_plan", "web_search", "generate_artifact"} <= offered
                and any(w in lowered for w in _WRITE_WORDS)):
            # Work of three steps: shown as a plan first, as the prompt asks of a real model.
            return [_text("Here is my plan; I start with a search."), _plan_call(0),
                    _call("web_search", {"query": _words(ask, 10) or "canvas"})]
        if "web_search" in offered and (known is None or any(w in lowered for w in _SEARCH_WORDS)):
            return [_text("Let me look that up first."), _call("web_search", {"query": _words(ask, 10) or "canvas"})]
        wants_new = any(w in lowered for w in ("new ", "another", "start over"))
        if known is not None and "rewrite_artifact" in offered and not wants_new:
            content, language = quick_rewrite(known, ask)
            return [_text("Rewriting the draft."), _call("rewrite_artifact", _rewrite(content, language))]
        if "generate_artifact" in offered and (known is None or wants_new or any(w in lowered for w in _WRITE_WORDS)):
            return [_text("Drafting it in the canvas."), _call("generate_artifact", _draft(ask, ""))]
        return [_text(f"You said: “{_words(ask, 30)}”.\n\nI am the **offline demo model**: I answer from a "
                      "script, so I cannot really discuss it. Ask me to *write* something to see the canvas, "
                      "or set `ANTHROPIC_API_KEY` for a real model.")]

    def _forced_input(self, name: str, request: ModelRequest) -> dict[str, Any]:
        messages = request.messages
        if name == "update_artifact":
            found = highlight_of(messages)
            text, ask = found if found else ("", _last_user_text(messages))
            return {"replacement": edit_span(text, ask) if text else "(edited by the demo model)"}
        if name == "rewrite_artifact":
            known = current_artifact(messages)
            ask = _last_user_text(messages)
            if known is None:
                return {"content": f"(The demo model could not find the artifact.) {ask}"}
            content, language = quick_rewrite(known, ask)
            return _rewrite(content, language)
        if name == "set_title":
            match = re.search(r"<user>\n(.*?)\n</user>", _user_text(messages[-1]["content"]), re.DOTALL)
            return {"title": _title(match[1] if match else "Demo conversation")}
        if name == "submit_review":  # the reviewer (CHAT_AGENT_REVIEW): the demo passes what it made
            return {"passed": True, "score": 0.9, "suggestions": [],
                    "feedback": "(Demo review) The result does what was asked; a real reviewer model reads it closely."}
        if name == "store_reflections":
            return {"styleRules": [], "content": []}  # an empty reflection changes nothing
        return {}


_PLAN = ("Search the web for sources", "Draft it in the canvas", "Suggest what to do next")


def _plan_call(finished: int) -> dict[str, Any]:
    """An `update_plan` call with the first `finished` steps of _PLAN done, the next one in progress."""
    steps = [{"title": title, "status": "done" if i < finished else "in_progress" if i == finished else "pending"}
             for i, title in enumerate(_PLAN)]
    return _call("update_plan", {"steps": steps})


def _turn_calls(messages: list[dict[str, Any]]) -> set[str]:
    """The tools called since the user's message that started this turn."""
    names: set[str] = set()
    for message in reversed(messages):
        content = message.get("content")
        if message["role"] == "user" and (isinstance(content, str) or any(
                isinstance(b, dict) and b.get("type") != "tool_result" for b in content or [])):
            break
        if message["role"] == "assistant" and isinstance(content, list):
            names |= {b["name"] for b in content if isinstance(b, dict) and b.get("type") == "tool_use"}
    return names


def _rewrite(content: str, language: str | None) -> dict[str, Any]:
    return {"content": content, **({"language": language} if language else {})}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _call(name: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": new_id("toolu_demo"), "name": name, "input": data}


def _pieces(text: str, words: int) -> list[str]:
    tokens = re.findall(r"\S+\s*|\s+", text)
    return ["".join(tokens[i:i + words]) for i in range(0, len(tokens), words)] or [text]


def _json_pieces(data: dict[str, Any], size: int = 24) -> list[str]:
    raw = json.dumps(data, ensure_ascii=False)
    return [raw[i:i + size] for i in range(0, len(raw), size)]


def _source_list(result: str) -> str:
    found = re.findall(r"^\[(\d+)\] (.*)\nURL: (\S+)", result, re.MULTILINE)
    return "\n".join(f"{n}. [{title}]({url})" for n, title, url in found) or "(no sources)"


def _draft(ask: str, search: str) -> dict[str, Any]:
    title = _title(ask)
    if any(w in ask.lower() for w in _CODE_WORDS):
        name = re.sub(r"\W+", "_", title.lower()).strip("_") or "demo"
        code = (f'"""{title}: a first version written by the demo model."""\n\n\n'
                f"def {name}(items):\n    total = 0\n    for item in items:\n        total += item\n"
                f"    return total\n\n\nif __name__ == \"__main__\":\n    print({name}([1, 2, 3]))\n")
        return {"title": title, "type": "code", "language": "python", "content": code}
    sources = _source_list(search) if search else ""
    topic = re.sub(r"^(please\s+)?(write|draft|create|make)\s+(me\s+)?", "", _words(ask, 12), flags=re.I)
    body = (f"# {title}\n\nA first draft on *{topic or title}*, written by the offline demo model."
            "\n\n## Why it matters\n\nGood writing starts with a clear goal. This draft gives you something to "
            "shape: select any sentence and ask for a change, or use the quick actions.\n\n## Key points\n\n"
            "- Start with the reader's question\n- Keep each paragraph to one idea\n- End with what to do next\n\n"
            "## Next steps\n\nEdit this text directly, switch between versions, and export it as Markdown or Word.\n")
    if sources:
        body += f"\n## Sources\n\n{sources}\n"
    return {"title": title, "type": "text", "content": body}


def demo_settings(settings: Settings) -> Settings:
    """The settings of a demo server: the demo model for everything, and nothing else to pick."""
    return settings.model_copy(update={"demo": True, "model": MODEL_NAME, "small_model": MODEL_NAME,
                                       "allowed_models": (MODEL_NAME,)})
