"""An MCP server's tool as a LangChain tool, so the registry runs it like any other: its
timeout, output cap, cancellation, progress and error handling apply unchanged."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
from typing import Annotated, Any, Awaitable, Callable

import mcp_types
from langchain_core.tools import BaseTool, InjectedToolArg

from chat_agent.files.catalog import FileError
from chat_agent.files.images import ImageError, image_block, prepare_image
from chat_agent.tooling._types import ToolContext

SEPARATOR = "__"  # NAME__TOOL
_NOT_IN_NAME = re.compile(r"[^a-zA-Z0-9_-]")
Caller = Callable[[str, dict[str, Any], Callable[..., Awaitable[None]]], Awaitable[mcp_types.CallToolResult]]


class McpToolError(Exception):
    """The server's tool answered with `isError`; the message is what it said."""


def tool_name(server: str, tool: str) -> str:
    """What the model calls it: NAME__TOOL, within the API's 64 characters of [a-zA-Z0-9_-]."""
    return f"{server}{SEPARATOR}{_NOT_IN_NAME.sub('_', tool)}"[:64]


class McpTool(BaseTool):
    """Calls `remote` on an MCP server through `caller` (the server's supervisor, which
    restarts a crashed server); the input schema is the server's own JSON Schema."""

    remote: str
    caller: Caller
    response_format: str = "content_and_artifact"

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("MCP tools are async")

    async def _arun(self, mcp_call_context: Annotated[ToolContext, InjectedToolArg], **arguments: Any) -> Any:
        ctx = mcp_call_context

        async def progress(done: float, total: float | None, message: str | None) -> None:
            ctx.progress(message or (f"{done:g} of {total:g}" if total else f"{done:g}"))

        result = await self.caller(self.remote, arguments, progress)
        content, output = await convert(result, ctx)
        if result.is_error:
            raise McpToolError(_text_of(content) or "the tool reported an error")
        return content, output


def make_tool(server: str, tool: mcp_types.Tool, caller: Caller) -> McpTool:
    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return McpTool(name=tool_name(server, tool.name), description=tool.description or tool.title or tool.name,
                   args_schema=schema, remote=tool.name, caller=caller,
                   metadata={"mcp_server": server, "mcp_tool": tool.name})


async def convert(result: mcp_types.CallToolResult, ctx: ToolContext) -> tuple[list[dict], Any]:
    """(blocks for the model's tool_result, the value for tool_end.output)."""
    model: list[dict] = []
    shown: list[dict] = []
    for item in result.content:
        if isinstance(item, mcp_types.TextContent):
            model.append({"type": "text", "text": item.text})
            shown.append({"type": "text", "text": item.text})
        elif isinstance(item, mcp_types.ImageContent):
            await _image(item, ctx, model, shown)
        else:
            note = _describe(item)
            model.append({"type": "text", "text": note})
            shown.append({"type": "text", "text": note})
    if not model and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
        model.append({"type": "text", "text": text})
        shown.append({"type": "text", "text": text})
    if all(block["type"] == "text" for block in shown):
        return model, "\n".join(block["text"] for block in shown)
    return model, shown


async def _image(item: mcp_types.ImageContent, ctx: ToolContext, model: list[dict], shown: list[dict]) -> None:
    try:
        data = base64.b64decode(item.data, validate=True)
        prepared = await asyncio.to_thread(prepare_image, data)  # checked, and sized for the model
    except (binascii.Error, ImageError) as exc:
        note = f"[an image the tool returned could not be used: {exc}]"
        model.append({"type": "text", "text": note})
        shown.append({"type": "text", "text": note})
        return
    model.append(image_block(prepared))
    entry: dict[str, Any] = {"type": "image", "mediaType": prepared.media_type, "width": prepared.width,
                             "height": prepared.height}
    files = ctx.services.files
    if files is not None:  # kept with the conversation: the UI shows it, other tools can use it
        try:
            stored = await files.save(data, f"mcp-image.{item.mime_type.rpartition('/')[2] or 'png'}",
                                      source="generated")
        except (FileError, ImageError):
            pass
        else:
            model.append({"type": "text", "text": stored.label})
            entry.update(fileId=stored.id, url=files.url(stored))
    shown.append(entry)


def _describe(item: Any) -> str:
    if isinstance(item, mcp_types.EmbeddedResource):
        resource = item.resource
        if isinstance(resource, mcp_types.TextResourceContents):
            return f"[resource {resource.uri}]\n{resource.text}"
        return f"[binary resource {resource.uri} ({resource.mime_type or 'unknown type'}) not shown]"
    if isinstance(item, mcp_types.ResourceLink):
        return f"[resource link: {item.uri}{' - ' + item.description if item.description else ''}]"
    kind = getattr(item, "type", type(item).__name__)
    return f"[{kind} content not shown]"


def _text_of(blocks: list[dict]) -> str:
    return "\n".join(block["text"] for block in blocks if block.get("type") == "text").strip()
