"""Frames to terminal text. Pure: functions return strings, the CLI decides where they go.

Every piece of output is an `Out`: `reply=True` marks the assistant's visible reply (stdout
in scripted mode, so a pipe gets exactly the reply), everything else is decoration (cards,
progress, thinking, notes), which scripted mode sends to stderr.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import IO, Any, Literal, Mapping

from chat_agent.protocol import (AnyServerFrame, ApprovalRequest, ArtifactChunk, ArtifactEdit, ArtifactFrame,
                                 ArtifactState, ArtifactTarget, AttachmentPart, Citation, CitationFrame,
                                 ContentChunk, ContextCleared, ContextUpdate, Done, ErrorFrame, Part, Pong,
                                 ReviewDecided, ReviewFrame, ReviewRequest, SessionFrame, StatusFrame, TextPart,
                                 ThinkingChunk, ThinkingPart, TitleFrame, ToolEnd, ToolPart, ToolProgress, ToolStart,
                                 VisibleMessage)

CLEAR_LINE = "\r\x1b[2K"
MAX_RESULTS = 5
STOP_NOTES = {"aborted": "⏹ aborted", "max_steps": "(stopped: step limit reached)",
              "max_tokens": "(stopped: output token limit reached)", "refusal": "(the model refused)",
              "error": "(the turn ended with an error)"}


@dataclass(frozen=True)
class Style:
    """ANSI styling, or none at all when `color` is off."""

    color: bool = False

    @classmethod
    def for_stream(cls, stream: IO[str], env: Mapping[str, str]) -> Style:
        # no-color.org: NO_COLOR set to anything but the empty string turns colour off.
        return cls(color=stream.isatty() and not env.get("NO_COLOR"))

    def _sgr(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color and text else text

    def bold(self, text: str) -> str:
        return self._sgr("1", text)

    def dim(self, text: str) -> str:
        return self._sgr("2", text)

    def red(self, text: str) -> str:
        return self._sgr("31", text)

    def green(self, text: str) -> str:
        return self._sgr("32", text)

    def yellow(self, text: str) -> str:
        return self._sgr("33", text)

    def cyan(self, text: str) -> str:
        return self._sgr("36", text)


@dataclass(frozen=True)
class Out:
    text: str
    reply: bool = False


def shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def compact_json(value: Any, limit: int = 100) -> str:
    return shorten(json.dumps(value, ensure_ascii=False, default=str), limit)


def token_bar(tokens: int, max_tokens: int, style: Style = Style(), width: int = 10) -> str:
    ratio = tokens / max_tokens if max_tokens > 0 else 0.0
    filled = min(width, max(0, round(ratio * width)))
    paint = style.green if ratio < 0.6 else style.yellow if ratio < 0.85 else style.red
    return f"[{paint('█' * filled)}{style.dim('░' * (width - filled))}] {tokens:,} / {max_tokens:,} tokens"


def tool_card(name: str, tool_input: dict[str, Any], style: Style) -> str:
    return f"{style.cyan('▸')} {style.bold(name)} {style.dim(compact_json(tool_input))}"


def error_text(output: Any) -> str:
    if isinstance(output, dict):
        output = output.get("error") or output.get("message") or output
    return shorten(output if isinstance(output, str) else compact_json(output), 160)


def search_results(output: Any) -> list[str]:
    """`title — url` per result, when a tool's output has a `results` list."""
    results = output.get("results") if isinstance(output, dict) else None
    if not isinstance(results, list):
        return []
    lines = []
    for item in results[:MAX_RESULTS]:
        if isinstance(item, dict) and item.get("filename"):  # search_knowledge: a passage of a document
            page = f", page {item['page']}" if item.get("page") is not None else ""
            lines.append(f"{shorten(str(item['filename']), 80)}{page}")
        elif isinstance(item, dict):
            title, url = str(item.get("title") or "").strip(), str(item.get("url") or "").strip()
            lines.append(" — ".join(part for part in (shorten(title, 80), url) if part) or "(untitled)")
    if len(results) > MAX_RESULTS:
        lines.append(f"… and {len(results) - MAX_RESULTS} more")
    return lines


def tool_summary(name: str, output: Any, is_error: bool, duration: float | None, style: Style) -> str:
    took = f" {duration:.1f}s" if duration is not None else ""
    if is_error:
        return f"  {style.red('✗')} {name}{took} {style.red(error_text(output))}"
    lines = [f"  {style.green('✓')} {name}{took}"]
    lines += [f"    {style.dim(line)}" for line in search_results(output) + file_lines(output)]
    return "\n".join(lines)


def file_lines(output: Any) -> list[str]:
    """Where to fetch what a tool made: an image's URL, each file code wrote, research sources."""
    if not isinstance(output, dict):
        return []
    made = [output] if isinstance(output.get("url"), str) else []
    made += [f for f in output.get("files") or [] if isinstance(f, dict) and isinstance(f.get("url"), str)]
    lines = [f"{f.get('width')}×{f.get('height')} {f['url']}" if f.get("width") else f["url"] for f in made]
    sources = output.get("sources")
    if isinstance(sources, list):
        lines += [f"[{s.get('n')}] {s.get('url')}" for s in sources[:MAX_RESULTS] if isinstance(s, dict)]
    return lines


def review_line(review: ReviewFrame, style: Style) -> str:
    """A review's verdict: passed or not, the score, what it judged, the feedback, the suggestions."""
    what = f"version {review.target.index}" if isinstance(review.target, ArtifactTarget) else review.target.file_id
    head = f"{'✓' if review.passed else '✗'} review {'passed' if review.passed else 'failed'} " \
           f"{round(review.score * 100)}% ({what}{f', revision {review.revision}' if review.revision else ''})"
    line = (style.green(head) if review.passed else style.yellow(head)) + f": {review.feedback}"
    return line + "".join(f"\n    - {s}" for s in review.suggestions)


def artifact_line(artifact: ArtifactState, style: Style) -> str:
    version = artifact.current
    kind = version.type + (f", {version.language}" if version.language else "")
    return (f"{style.cyan('▣')} {style.bold(version.title)} "
            f"{style.dim(f'v{artifact.current_index}/{artifact.version_count} ({kind})')}")


def artifact_text(artifact: ArtifactState | None, style: Style) -> list[Out]:
    """The artifact's current version in full (`/artifact`, `--artifact`): its header line
    as decoration, its text as reply (what a pipe gets)."""
    if artifact is None:
        return [Out(style.dim("no artifact in this conversation yet") + "\n")]
    content = artifact.current.content
    return [Out(artifact_line(artifact, style) + "\n"), Out(content + ("" if content.endswith("\n") else "\n"),
                                                              reply=True)]


def edit_line(edit: ArtifactEdit, style: Style) -> str:
    changed = sum(len(change.text) for change in edit.changes)
    title = f"{style.bold(edit.title)} " if edit.title else ""
    return f"{style.cyan('▣')} {title}{style.dim(f'v{edit.index}: v{edit.base_index} edited ({changed:,} characters)')}"


def source_line(citation: Citation, style: Style) -> str:
    """A cited source, as the reply's footnotes show it: `[1] manual.pdf, page 37 — “quote”`."""
    page = f", page {citation.page}" if citation.page is not None else ""
    quote = shorten(" ".join(citation.quote.split()), 100)
    return f"  {style.cyan(f'[{citation.index}]')} {citation.filename}{page} {style.dim(f'— “{quote}”')}"


def source_lines(citations: list[Citation], style: Style) -> list[str]:
    """Each cited source once, by its number."""
    seen: dict[tuple[int, str], Citation] = {}
    for citation in citations:
        seen.setdefault((citation.index, citation.document_id), citation)
    return [source_line(c, style) for c in seen.values()]


def frame_json(frame: AnyServerFrame) -> str:
    # exclude_unset: the keys the server sent, no defaults the client filled in.
    return frame.model_dump_json(exclude_unset=True)


Cursor = Literal["line", "content", "thinking", "status"]


@dataclass
class TurnRenderer:
    """Folds frames into output. Remembers only what layout needs: where the cursor is, the
    open tool calls, and the latest context figures for the token bar."""

    style: Style = field(default_factory=Style)
    live: bool = False  # draw progress in place (only on a terminal)
    context: ContextUpdate | None = None
    _cursor: Cursor = "line"
    _summarized: bool = False
    _after_clear: bool = False
    _open_tools: dict[str, str] = field(default_factory=dict)
    _artifact_chars: dict[str, int] = field(default_factory=dict)
    _citations: list[Citation] = field(default_factory=list)  # the reply's sources, listed at its end
    _reply_tail: str = ""  # the reply's last characters written this turn ("" before any)
    _new_part: bool = False  # a tool card, thinking or review since the reply's last text

    def render(self, frame: AnyServerFrame) -> list[Out]:
        match frame:
            case CitationFrame(citation=citation):
                self._citations.append(citation)
                return []
            case ContentChunk(content=text):
                return self._text_part() + self._stream(text, "content") if text else []
            case ThinkingChunk(content=text):
                self._new_part = self._new_part or bool(text)
                return self._stream(text, "thinking")
            case ToolStart(tool_id=tool_id, name=name, input=tool_input):
                self._open_tools[tool_id] = name
                self._new_part = True
                return self._line(tool_card(name, tool_input, self.style))
            case ApprovalRequest(name=name):
                return self._line(self.style.bold(f"⏸ {name} waits for your approval"))
            case ReviewFrame():
                self._new_part = True
                return self._line(review_line(frame, self.style))
            case ReviewRequest():
                return self._line(self.style.bold("⏸ the review waits for your decision: revise or accept"))
            case ReviewDecided(decision=decision, reason=reason):
                why = {"timed_out": " (no answer in time)", "aborted": " (the turn stopped)",
                       "interrupted": " (the server stopped)"}.get(reason or "", "")
                return self._line(self.style.dim(f"review: {decision}{why}"))
            case ToolProgress(tool_id=tool_id, elapsed=elapsed, status=status):
                name = self._open_tools.get(tool_id, "")
                who = f"{name}: " if len(self._open_tools) > 1 and name else ""
                return self._status(f"… {elapsed:.1f}s {who}{status}")
            case ArtifactChunk(tool_id=tool_id, content=text):
                chars = self._artifact_chars[tool_id] = self._artifact_chars.get(tool_id, 0) + len(text)
                return self._status(f"… writing the artifact ({chars:,} characters)")
            case ToolEnd(tool_id=tool_id, name=name, output=output, is_error=is_error, duration=duration):
                self._open_tools.pop(tool_id, None)
                return self._line(tool_summary(name, output, is_error, duration, self.style))
            case ArtifactFrame(artifact=artifact):
                return self._line(artifact_line(artifact, self.style))
            case ArtifactEdit():
                return self._line(edit_line(frame, self.style))
            case TitleFrame(title=title):
                return self._line(self.style.dim(f"title: {title}"))
            case ContextUpdate():
                return self._context(frame)
            case ContextCleared():
                self._after_clear = True
                return self._line(self.style.dim("context cleared"))
            case Done():
                return self._done(frame)
            case ErrorFrame(code=code, message=message):
                return self._line(self.style.red(f"✗ error [{code}] {message}"))
            case StatusFrame(state="retrying", detail=detail):  # worth a line, terminal or not
                return self._line(self.style.yellow(f"↻ {detail}"))
            case StatusFrame(elapsed=elapsed, detail=detail):
                return self._status(f"… {elapsed:.0f}s {detail}")
            case Pong():
                return self._line(self.style.dim("pong"))
            case _:  # session: drawn by render_history, not per frame
                return []

    def note(self, text: str) -> list[Out]:
        """A line of the CLI's own (reconnecting, aborting…), placed like any other line."""
        return self._line(self.style.yellow(text))

    def bar(self) -> str:
        if self.context is None:
            return ""
        note = self.style.yellow(" · older history summarized") if self._summarized else ""
        return token_bar(self.context.tokens, self.context.max_tokens, self.style) + note

    def _stream(self, text: str, kind: Literal["content", "thinking"]) -> list[Out]:
        if not text:
            return []
        out = [] if self._cursor in (kind, "line") else self._to_line()
        out.append(Out(text if kind == "content" else self.style.dim(text), reply=kind == "content"))
        if kind == "content":
            self._reply_tail = (self._reply_tail + text)[-2:]
        self._cursor = "line" if text.endswith("\n") else kind
        return out

    def _text_part(self) -> list[Out]:
        """A blank line in the reply between its text parts, as the page shows them (the
        server folds parts the same way: text after a tool card, thinking or a review starts
        a new one), so `-m` output does not run one part into the next."""
        new, self._new_part = self._new_part, False
        if not new or not self._reply_tail:
            return []
        gap = "\n" * (2 - len(self._reply_tail) + len(self._reply_tail.rstrip("\n")))
        out = self._to_line() if self._cursor not in ("content", "line") else []
        self._reply_tail = "\n\n"
        return out + ([Out(gap, reply=True)] if gap else [])

    def _status(self, text: str) -> list[Out]:
        if not self.live:
            return []
        out = [Out(CLEAR_LINE)] if self._cursor == "status" else self._to_line()
        self._cursor = "status"
        return out + [Out(f"  {self.style.dim(text)}")]

    def _line(self, text: str) -> list[Out]:
        return self._to_line() + [Out(text + "\n")]

    def _to_line(self) -> list[Out]:
        """Get to the start of a clean line. After reply text that newline belongs to the
        reply (its part ends there), so the reply alone reads as the message's `content`:
        its text parts, a blank line between them."""
        cursor, self._cursor = self._cursor, "line"
        if cursor == "line":
            return []
        if cursor == "content":  # part of the reply: a text part ends on its line
            self._reply_tail = (self._reply_tail + "\n")[-2:]
            return [Out("\n", reply=True)]
        return [Out(CLEAR_LINE if cursor == "status" else "\n")]

    def _context(self, frame: ContextUpdate) -> list[Out]:
        self.context = frame
        self._summarized = self._summarized or frame.summarized
        if not self._after_clear:
            return []  # shown with `done`, once per turn
        self._after_clear = False
        return self._line(self.bar())

    def _done(self, frame: Done) -> list[Out]:
        # Scripted output ends the reply with a newline, as a shell expects.
        out = [Out("\n", reply=True)] if self._cursor == "content" else self._to_line()
        self._cursor = "line"
        note = STOP_NOTES.get(frame.stop_reason)
        if frame.detail:  # a refusal's reason, or what the provider could not do (thinking)
            note = f"{note} {frame.detail}" if note else f"({frame.detail})"
        if note:
            paint = self.style.yellow if frame.stop_reason != "error" else self.style.red
            out.append(Out(paint(note) + "\n"))
        if self._citations:
            out += [Out(self.style.dim("sources:") + "\n")] + [Out(line + "\n") for line in
                                                              source_lines(self._citations, self.style)]
            self._citations = []
        if self.context is not None:
            out.append(Out(self.bar() + "\n"))
        self._summarized = False
        self._reply_tail, self._new_part = "", False
        self._open_tools.clear()
        self._artifact_chars.clear()
        return out


def attachment_line(part: AttachmentPart, style: Style) -> str:
    size = f"{part.width}×{part.height}" if part.width and part.height else ""
    where = part.url or ""
    return f"  {style.cyan('📎')} {part.filename or part.kind} {style.dim(' '.join(filter(None, (size, where))))}".rstrip()


def part_lines(part: Part, style: Style) -> list[str]:
    """One part of a message as the live turn drew it: text, dimmed thinking, a tool card."""
    match part:
        case TextPart(text=text, citations=citations):
            return [text, *source_lines(citations, style)]
        case ThinkingPart(text=text):
            return [style.dim(text)]
        case ToolPart():
            return [tool_card(part.name, part.input, style),
                    tool_summary(part.name, part.output, part.is_error, part.duration, style)]
        case AttachmentPart():
            return [attachment_line(part, style)]
    return []


def render_history(session: SessionFrame, style: Style) -> str:
    """The conversation so far, from a session snapshot (`--conversation`): each message's
    parts in the order they happened. The snapshot has the newest messages only; a line
    says when older ones can be read (`/more`)."""
    lines = [style.bold(session.title)] if session.title else []
    if session.more_before is not None:
        lines.append(style.dim("(older messages: /more)"))
    lines.append(render_messages(session.messages, style))
    if session.artifact is not None:
        lines.append(artifact_line(session.artifact, style))
    return "\n".join(line for line in lines if line)


def render_messages(messages: list[VisibleMessage], style: Style) -> str:
    lines: list[str] = []
    for message in messages:
        if message.role == "user":
            lines.append(f"{style.bold('you ›')} {message.content}")
            lines += [attachment_line(p, style) for p in message.parts if isinstance(p, AttachmentPart)]
            continue
        wrote = False  # a text part after an earlier one gets a blank line, as in the live turn
        for part in message.parts:
            if isinstance(part, TextPart) and part.text:
                lines += [""] if wrote else []
                wrote = True
            lines += part_lines(part, style)
        if message.status != "complete":
            lines.append(style.yellow(f"({message.status})"))
    return "\n".join(lines)


def banner(session: SessionFrame, style: Style) -> str:
    off = [f"{t.name} ({t.reason})" if t.reason else t.name for t in session.tools if not t.enabled]
    parts = [f"conversation {session.conversation_id}", "/help for commands"]
    if off:
        parts.append("off: " + ", ".join(off))
    return style.dim(" · ".join(parts))
