"""The offline demo model: `python server.py --demo` with no API key.

It speaks the ModelClient interface with Anthropic-shaped content blocks, so everything above
it (the loop, tools, canvas, titles, summaries, reviews) runs for real; only the words are
scripted. A first message shows a plan (`update_plan`), searches the web (on canned results
when no search service is configured), drafts an artifact in the canvas and says how to go
on; attached documents are answered from their own text (a long one read with
analyze_document); "long" asks for a reply long and slow enough to stop or to reload in the
middle of; forced tool calls (a highlight edit's `update_artifact`, a quick action's
`rewrite_artifact`, a title's `set_title`, the reviewer's `submit_review`) are honoured as a
real model must.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, AsyncIterator, Sequence

from chat_agent.config import Settings
from chat_agent.ids import new_id
from chat_agent.model.demo_canvas import (Known, current_artifact, edit_span, highlight_of, judge, quick_rewrite,
                                          revise)
from chat_agent.model.demo_docs import (Attached, answer, answer_read, attached, draft_from, is_document_block,
                                        read_spec, search_term)
from chat_agent.model.types import ModelReply, ModelRequest, StreamItem, TextDelta, ThinkingDelta, ToolInputDelta
from chat_agent.protocol import Usage

MODEL_NAME = "demo"
NOTICE = ("Demo mode: replies come from a scripted offline model, not a real one (web search answers with "
          "canned results). Set ANTHROPIC_API_KEY and start without --demo for real answers.")

LONG_CHARS = 2_500  # a text block this long streams slower (the long reply, some 30 s at the default pace)
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
    """The user's own words: what the server adds to a message (attachments, the artifact)
    comes before them, so they are its last text block (as the reviewer reads them too)."""
    if isinstance(block_list, str):
        return block_list
    texts = [b for b in block_list or [] if isinstance(b, dict) and b.get("type") == "text"]
    if not texts or is_document_block(texts[-1]) or texts[-1].get("text", "").startswith("<artifact"):
        return ""
    return texts[-1].get("text", "")


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


def _documents(messages: list[dict[str, Any]]) -> list[Attached]:
    """The documents of the newest user message that has any: a follow-up question is about
    what was attached last."""
    for message in reversed(messages):
        if message["role"] == "user" and (found := attached(message["content"])):
            return found
    return []


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
                slow = len(block["text"]) >= LONG_CHARS  # the long reply: slow enough to stop or reload
                for piece in _pieces(block["text"], 2 if slow else 3):
                    yield TextDelta(piece)
                    await asyncio.sleep(self.pace * (3 if slow else 1))
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
        messages = request.messages
        lowered = ask.lower()
        done = {name for name, _ in results}
        known = current_artifact(messages)
        steps = _plan_steps(messages)  # this turn's plan, when it keeps one
        reviewed = ask.startswith(REVIEW_PREFIX)  # a revision the reviewer asked for
        if "web_search" in done:
            found = dict(results)["web_search"]
            sources = len(re.findall(r"^\[\d+\] ", found, re.MULTILINE))
            if "generate_artifact" in offered and (known is None or any(w in lowered for w in _WRITE_WORDS)):
                return [_text(f"I found {sources} sources. Drafting it in the canvas now."),
                        *([_plan_call(steps, 1)] if steps else []), _call("generate_artifact", _draft(ask, found))]
            return [_text(f"Here is what the search found ({sources} sources):\n\n"
                          + _source_list(found))]
        if "analyze_document" in done:
            docs = _documents(messages)
            doc = docs[0] if docs else Attached("the document", None, None)
            return [_text(answer_read(doc, dict(results)["analyze_document"], ask))]
        if "generate_artifact" in done and steps:
            return [_plan_call(steps, len(steps))]  # every step ticked off; the closing words follow
        if done == {"update_plan"} and "generate_artifact" in _turn_calls(messages):
            done = {"generate_artifact"}
        if "update_artifact" in done:
            return [_text("Changed the passage you selected; the rest of the draft is as it was. Switch versions "
                          "above the canvas to compare.")]
        if "rewrite_artifact" in done:
            return [_text("Revised the draft as the review asked: the new version goes back to the reviewer."
                          if reviewed else "Rewrote the draft as asked: it is a new version in the canvas.")]
        if "generate_artifact" in done:
            return [_text("Done: the draft is in the canvas. Try selecting a passage and asking for a change, or "
                          "one of the quick actions above it (emojis, length, reading level). Ask for something "
                          "*long* to see a reply you can stop halfway. *This reply comes from the offline demo "
                          "model.*")]
        if results:
            return [_text("The tool has answered; that is all the demo model has scripted for it.")]
        if reviewed and known is not None and "rewrite_artifact" in offered:
            return [_text("The reviewer asked for changes; revising the draft."),
                    _call("rewrite_artifact", _rewrite(revise(known, ask), known.language))]
        if (docs := self._asked_documents(messages, lowered)):
            return self._from_document(docs[0], offered, known, ask)
        if _wants_long(lowered):
            return [_text(_long_reply(ask))]
        if (known is None and {"update_plan", "generate_artifact"} <= offered
                and any(w in lowered for w in _WRITE_WORDS)):
            # Work of three steps: shown as a plan first, as the prompt asks of a real model.
            if "web_search" in offered:
                return [_text("Here is my plan; I start with a search."), _plan_call(_PLAN, 0),
                        _call("web_search", {"query": _words(ask, 10) or "canvas"})]
            return [_text(f"Here is my plan. The outline: {', '.join(_SECTIONS)}; now the draft."),
                    _plan_call(_PLAN_OFFLINE, 1), _call("generate_artifact", _draft(ask, ""))]
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
                      "attach a document and ask about it, ask for something *long* to try Stop, or set "
                      "`ANTHROPIC_API_KEY` for a real model.")]

    @staticmethod
    def _asked_documents(messages: list[dict[str, Any]], lowered: str) -> list[Attached]:
        """The documents this message is about: its own attachments, or earlier ones when it
        asks about a document and not for writing."""
        last = next((m for m in reversed(messages) if m["role"] == "user"), None)
        if last is not None and (own := attached(last["content"])):
            return own
        about = any(w in lowered for w in ("document", "file", "pdf", "attach", "say", "quote", "summar", "?"))
        return _documents(messages) if about and not any(w in lowered for w in _WRITE_WORDS) else []

    @staticmethod
    def _from_document(doc: Attached, offered: set[Any], known: Known | None, ask: str) -> list[dict[str, Any]]:
        """An answer from the document's text; a draft from it when asked to write; a long one
        read first with analyze_document, as its description tells a model to."""
        if doc.text is None:
            if "analyze_document" not in offered:
                return [_text(f"**{doc.name}** is too long to be shown to me whole, and reading it "
                              "(analyze_document) is off here.")]
            term = search_term(ask)
            how = {"query": term} if term else {"parts": read_spec(doc)}
            return [_text(f"**{doc.name}** is long ({doc.parts:,} parts): I search it for “{term}”." if term
                          else f"**{doc.name}** is long ({doc.parts:,} parts): I read its start."),
                    _call("analyze_document", {**({"document_id": doc.file_id} if doc.file_id else {}), **how})]
        lowered = ask.lower()
        if any(w in lowered for w in _WRITE_WORDS):
            if known is not None and "rewrite_artifact" in offered and "new " not in lowered:
                added = draft_from(doc, doc.text, f"From {doc.name}").split("\n", 2)[2]
                return [_text(f"Adding what **{doc.name}** says to the draft."), _call(
                    "rewrite_artifact", _rewrite(known.content.rstrip("\n") + f"\n\n## From {doc.name}\n\n" + added,
                                                 known.language))]
            if "generate_artifact" in offered:
                title = _title(ask) if _title(ask) != "Demo Draft" else doc.name
                return [_text(f"Drafting it in the canvas from **{doc.name}**."), _call("generate_artifact", {
                    "title": title, "type": "text", "content": draft_from(doc, doc.text, title)})]
        return [_text(answer(doc, doc.text, ask))]

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
        if name == "submit_review":  # the reviewer (CHAT_AGENT_REVIEW): the demo's own scripted judgment
            after = re.search(r"<artifact_after [^>]*type=\"(\w+)\"[^>]*>\n(.*)\n</artifact_after>",
                              _user_text(messages[-1]["content"]) or str(messages[-1]["content"]), re.DOTALL)
            return judge(after[2], after[1]) if after else judge("", "image")
        if name == "store_reflections":
            return {"styleRules": [], "content": []}  # an empty reflection changes nothing
        return {}


REVIEW_PREFIX = "[Review of your result"  # how chat_agent.agent.critic hands a failed review back
_PLAN = ("Search the web for sources", "Draft it in the canvas", "Suggest what to do next")
_PLAN_OFFLINE = ("Outline the piece", "Draft it in the canvas", "Suggest what to do next")
_SECTIONS = ("why it matters", "key points", "next steps")


def _plan_call(steps: Sequence[str], finished: int) -> dict[str, Any]:
    """An `update_plan` call with the first `finished` steps done, the next one in progress."""
    return _call("update_plan", {"steps": [
        {"title": title, "status": "done" if i < finished else "in_progress" if i == finished else "pending"}
        for i, title in enumerate(steps)]})


def _plan_steps(messages: list[dict[str, Any]]) -> tuple[str, ...] | None:
    """The step titles of this turn's first plan, or None when it keeps none."""
    plans = [b["input"].get("steps") or [] for b in _turn_blocks(messages) if b.get("name") == "update_plan"]
    return tuple(str(step.get("title", "")) for step in plans[0]) if plans else None


def _wants_long(lowered: str) -> bool:
    """"long" alone, or a long story, text, reply…: not "longer", which is an edit."""
    return re.search(r"\blong\b", lowered) is not None and (
        len(lowered.split()) <= 3 or any(w in lowered for w in ("story", "reply", "answer", "text", "tale", "essay")))


def _long_reply(ask: str) -> str:
    """A story of a dozen paragraphs, streamed slowly (see DemoModel.stream): time to press
    Stop, or to reload the page and watch it go on."""
    topic = re.sub(r"\b(please|write|tell|give|me|a|an|the|long|story|reply|answer|text|about|of|on)\b", " ",
                   _words(ask, 16), flags=re.I)
    topic = " ".join(topic.split()) or "a lighthouse keeper"
    places = ("by the harbour", "in the old library", "on the night train", "at the edge of the forest",
              "under the bridge", "in a crowded market", "on the top floor", "at the last stop",
              "in the village hall", "on the ferry", "behind the bakery", "at the lighthouse door")
    paragraphs = [f"# A long story: {topic}\n\nThis is the demo model's long reply: it streams slowly on purpose. "
                  "Press **Stop** to end it where it is, or reload the page halfway and watch it carry on "
                  "from where it was."]
    for n, place in enumerate(places, 1):
        paragraphs.append(
            f"## Part {n}\n\nIt began {place}, where the story of {topic} picked up again. Nobody there "
            "expected much of the morning: the light came in slowly, the coffee was too strong, and the "
            "radio repeated the same weather report twice. Yet something small had changed, and whoever "
            f"noticed it first would tell the others before noon. By the end of part {n} the change had a "
            "name, a reason and a consequence, each of which would matter later in ways no one guessed.")
    paragraphs.append("## The end\n\nAnd that is where the story stops. *The offline demo model wrote this "
                      "from a script; a real model writes something worth reading.*")
    return "\n\n".join(paragraphs)


def _turn_blocks(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool calls made since the user's message that started this turn, oldest first."""
    calls: list[dict[str, Any]] = []
    for message in reversed(messages):
        content = message.get("content")
        if message["role"] == "user" and (isinstance(content, str) or any(
                isinstance(b, dict) and b.get("type") != "tool_result" for b in content or [])):
            break
        if message["role"] == "assistant" and isinstance(content, list):
            calls[:0] = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
    return calls


def _turn_calls(messages: list[dict[str, Any]]) -> set[str]:
    """The tools called since the user's message that started this turn."""
    return {b["name"] for b in _turn_blocks(messages)}


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
