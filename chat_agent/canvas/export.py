"""Export an artifact as Markdown, as a source file, or as a Word document.

Pure functions: bytes in memory, no I/O, no web framework, so the HTTP layer only sets
headers. The Word export renders the Markdown (markdown-it-py's CommonMark token stream
plus GFM tables and strikethrough) into real Word structure: built-in heading, list and
quote styles, hyperlinks, tables. It never pastes Markdown markers into the document.
That writer lives in canvas.docx (render, inline, oxml); this module is the public
entry point and owns the Markdown and plain-file output.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

from chat_agent.canvas.docx.render import code_docx, text_docx
from chat_agent.text import one_line

__all__ = ["Exported", "ExportError", "export_artifact"]

MARKDOWN_TYPE = "text/markdown; charset=utf-8"
TEXT_TYPE = "text/plain; charset=utf-8"
DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
MAX_STEM = 80

# language (lower case, as the model names it) → file extension
_EXTENSIONS: dict[str, str] = {
    "python": "py", "py": "py", "typescript": "ts", "ts": "ts", "tsx": "tsx",
    "javascript": "js", "js": "js", "jsx": "jsx", "rust": "rs", "rs": "rs",
    "go": "go", "golang": "go", "java": "java", "c": "c", "h": "h", "cpp": "cpp",
    "c++": "cpp", "cxx": "cpp", "csharp": "cs", "c#": "cs", "cs": "cs", "php": "php",
    "ruby": "rb", "rb": "rb", "swift": "swift", "kotlin": "kt", "kt": "kt",
    "scala": "scala", "sql": "sql", "html": "html", "css": "css", "scss": "scss",
    "less": "less", "json": "json", "yaml": "yaml", "yml": "yaml", "toml": "toml",
    "xml": "xml", "bash": "sh", "sh": "sh", "shell": "sh", "zsh": "zsh",
    "powershell": "ps1", "lua": "lua", "perl": "pl", "r": "r", "dart": "dart",
    "haskell": "hs", "elixir": "ex", "erlang": "erl", "clojure": "clj", "julia": "jl",
    "markdown": "md", "md": "md", "vue": "vue", "svelte": "svelte",
    "graphql": "graphql", "dockerfile": "dockerfile", "makefile": "mk",
    "objective-c": "m", "latex": "tex", "tex": "tex",
}
# Everything else is served as text/plain on purpose: an exported .html or .svg must
# never be rendered by a browser that opens the download inline.
_CODE_TYPES: dict[str, str] = {"json": "application/json", "md": MARKDOWN_TYPE}
_WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL"} | {f"{p}{i}" for p in ("COM", "LPT")
                                                     for i in range(1, 10)}


@dataclass(frozen=True, slots=True)
class Exported:
    body: bytes
    media_type: str
    filename: str


class ExportError(ValueError):
    """The request names a format or an artifact type that does not exist."""


def export_artifact(
    *,
    title: str,
    type: Literal["text", "code"],
    language: str | None,
    content: str,
    format: Literal["md", "docx", "code"],
) -> Exported:
    """Render one artifact version for download.

    Every combination is allowed: "md" of code is a fenced block under the title;
    "code" of text is the Markdown itself as .md; "docx" of code is a monospace document.
    """
    if type not in ("text", "code"):
        raise ExportError(f"unknown artifact type: {type!r}")
    is_code = type == "code"
    match format:
        case "md":
            text = _code_markdown(title, language, content) if is_code else content
            return Exported(_utf8(text), MARKDOWN_TYPE, _filename(title, "md"))
        case "code":
            ext = _extension(language) if is_code else "md"
            media = _CODE_TYPES.get(ext, TEXT_TYPE)
            return Exported(_utf8(content), media, _filename(title, ext))
        case "docx":
            line = one_line(title)
            body = code_docx(line, language, content) if is_code else text_docx(
                line, content)
            return Exported(body, DOCX_TYPE, _filename(title, "docx"))
    raise ExportError(f"unknown export format: {format!r}")


# --- Markdown and plain files ---------------------------------------------------------


def _utf8(text: str) -> bytes:
    # Lone surrogates can arrive from JSON; a download must not fail on them.
    return text.encode("utf-8", "replace")


def _code_markdown(title: str, language: str | None, content: str) -> str:
    # The fence must outrun any backtick run inside the code, or the code ends the block.
    longest = max((len(m) for m in re.findall(r"`+", content)), default=0)
    fence = "`" * max(3, longest + 1)
    info = re.sub(r"[^\w+#.-]", "", language or "")
    body = content if content.endswith("\n") or not content else content + "\n"
    heading = f"# {one_line(title)}\n\n" if title.strip() else ""
    return f"{heading}{fence}{info}\n{body}{fence}\n"


def _extension(language: str | None) -> str:
    return _EXTENSIONS.get((language or "").strip().lower(), "txt")


def _filename(title: str, ext: str) -> str:
    """An ASCII name safe in any file system and in a Content-Disposition header."""
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", ascii_title)
    stem = re.sub(r"-{2,}", "-", stem).strip("-._")
    if len(stem) > MAX_STEM:
        cut = stem.rfind("-", 0, MAX_STEM + 1)  # end on a word when one is near
        stem = stem[: cut if cut > MAX_STEM // 2 else MAX_STEM].rstrip("-._")
    if stem.split(".")[0].upper() in _WINDOWS_RESERVED:
        stem = f"{stem}-artifact"
    return f"{stem or 'artifact'}.{ext}"

