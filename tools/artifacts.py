"""The canvas tools: `generate_artifact`, `rewrite_artifact`, `update_artifact`.

Each works on the conversation's Canvas (`ctx.canvas`) and adds a version; the canvas
announces it with an `artifact` frame. `metadata["streams"]` names the input field whose
text the loop streams to the canvas (`artifact_chunk`) while the model is still writing it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from langchain_core.tools import BaseTool, InjectedToolArg, tool
from pydantic import Field

from chat_agent.tooling import Settings, ToolContext

GENERATE = """Create the canvas artifact: a markdown document (type "text") or a program (type "code", with its language).
Use it when the user asks for something substantial they will keep editing: an essay, a plan, a post, code.
If an artifact exists already, this replaces it with a new version; prefer update_artifact for small edits."""

REWRITE = """Write a full new version of the existing artifact (you see its current version in the conversation).
Use it for changes that touch most of it: restructuring, translating, changing length or tone, porting code.
Return the whole artifact, not a diff. Title, type and language stay unless you give new ones."""

UPDATE = """Edit part of the existing artifact without rewriting the rest.
Give `target`: text copied exactly from the current version that occurs there once, and `replacement`: what
replaces it. When the user has highlighted a passage, leave `target` out: `replacement` replaces the highlight."""


def _summary(state: Any, verb: str) -> tuple[str, dict[str, Any]]:
    current = state.current
    text = (f"{verb} the artifact “{current.title}” ({current.type}"
            + (f", {current.language}" if current.language else "")
            + f"): version {current.index} of {state.version_count}, {len(current.content)} characters.")
    return text, {"index": current.index, "versionCount": state.version_count, "title": current.title,
                  "type": current.type, "language": current.language}


def build_generate(settings: Settings) -> BaseTool:
    @tool("generate_artifact", description=GENERATE, response_format="content_and_artifact")
    async def generate_artifact(
        title: Annotated[str, Field(min_length=1, max_length=200, description="A short title.")],
        type: Annotated[Literal["text", "code"], Field(description="text: markdown; code: a program.")],
        content: Annotated[str, Field(min_length=1, description="The whole artifact.")],
        ctx: Annotated[ToolContext, InjectedToolArg],
        language: Annotated[str | None, Field(description="For code: python, typescript, …")] = None,
    ) -> tuple[str, dict[str, Any]]:
        canvas = ctx.canvas
        # The model wrote it whole, so it has seen it: the next turn need not show it again.
        state = canvas.add_version(type=type, title=title, language=language, content=content, source="model",
                                   seen_by_model=True)
        return _summary(state, "Created" if state.version_count == 1 else "Replaced")

    generate_artifact.metadata = {"streams": "content"}
    return generate_artifact


def build_rewrite(settings: Settings) -> BaseTool:
    @tool("rewrite_artifact", description=REWRITE, response_format="content_and_artifact")
    async def rewrite_artifact(
        content: Annotated[str, Field(min_length=1, description="The whole new version.")],
        ctx: Annotated[ToolContext, InjectedToolArg],
        title: Annotated[str | None, Field(max_length=200, description="A new title, if it changes.")] = None,
        type: Annotated[Literal["text", "code"] | None, Field(description="A new type, if it changes.")] = None,
        language: Annotated[str | None, Field(description="A new language (code), if it changes.")] = None,
    ) -> tuple[str, dict[str, Any]]:
        canvas = ctx.canvas
        current = canvas.current
        if current is None:
            raise ValueError("There is no artifact to rewrite yet; create one with generate_artifact.")
        kind = type or current.type
        state = canvas.add_version(type=kind, title=title or current.title, content=content, source="model",
                                   language=(language or current.language) if kind == "code" else None,
                                   seen_by_model=True)
        return _summary(state, "Rewrote")

    rewrite_artifact.metadata = {"streams": "content"}
    return rewrite_artifact


def _splice(content: str, ctx: ToolContext, target: str | None, replacement: str) -> tuple[str, int, int]:
    highlight = ctx.highlight
    if highlight is not None:
        return content[:highlight.start] + replacement + content[highlight.end:], highlight.start, highlight.end
    if not target:
        raise ValueError("Give `target`: the exact text of the current version to replace.")
    found = content.count(target)
    if found == 0:
        raise ValueError("`target` was not found in the current version; copy it exactly, "
                         "including spaces and line breaks, or use a shorter unique piece.")
    if found > 1:
        raise ValueError(f"`target` occurs {found} times in the current version; include more of the "
                         "surrounding text so it occurs exactly once.")
    start = content.index(target)
    return content[:start] + replacement + content[start + len(target):], start, start + len(target)


def build_update(settings: Settings) -> BaseTool:
    @tool("update_artifact", description=UPDATE, response_format="content_and_artifact")
    async def update_artifact(
        replacement: Annotated[str, Field(description="The new text for the target (or the highlight).")],
        ctx: Annotated[ToolContext, InjectedToolArg],
        target: Annotated[str | None, Field(description="Exact existing text to replace (omit for a highlight).")] = None,
    ) -> tuple[str, dict[str, Any]]:
        canvas = ctx.canvas
        current = canvas.current
        if current is None:
            raise ValueError("There is no artifact to update yet; create one with generate_artifact.")
        content, start, end = _splice(current.content, ctx, target, replacement)
        # An edit of the version the model has seen leaves it knowing the result (it chose
        # the text and its replacement), so the next turn need not show it again.
        state = canvas.add_version(type=current.type, title=current.title, language=current.language,
                                   content=content, source="model", seen_by_model=canvas.unseen() is None)
        text, output = _summary(state, "Updated")
        output["edit"] = {"start": start, "end": end, "length": len(replacement)}
        return f"{text} Replaced characters {start}-{end} with {len(replacement)} characters.", output

    update_artifact.metadata = {"streams": "replacement"}
    return update_artifact
