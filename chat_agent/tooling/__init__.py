"""The public tool API: everything a tool module needs, and all it may import of chat_agent.

A tool is a LangChain tool: `@tool` on a typed async function with a docstring, or any
`BaseTool`. It takes the call's context through an injected argument the model never sees,
reads the services the turn lends it from there (typed: `ctx.canvas`, `ctx.files`, …), and
raises on failure (the registry makes that an is_error result)::

    from chat_agent.tooling import Settings, ToolContext, ToolUnavailable

    def build(settings: Settings) -> BaseTool:
        @tool(response_format="content_and_artifact")
        async def web_search(query: str, ctx: Annotated[ToolContext, InjectedToolArg]) -> tuple[str, dict]:
            \"\"\"Search the web.\"\"\"
            ctx.progress(f"Searching the web for {query}")
            ...
            return text_for_the_model, value_for_the_ui
        return web_search

Besides the registry's own vocabulary it re-exports the types of the services and the few
helpers our tools share (images, documents, memories, model calls, text), so that a tool,
ours or a third party's, never reaches into the package's internals.
"""

from chat_agent.canvas.artifact import Canvas
from chat_agent.canvas.memory import MAX_CHARS as MEMORY_ITEM_CHARS
from chat_agent.canvas.memory import UserMemory, clean_item, item_key
from chat_agent.config import Settings
from chat_agent.files.attachments import DocumentLibrary
from chat_agent.files.catalog import ConversationFiles, FileError, StoredFile
from chat_agent.files.documents import ParsedDocument, read_parts, search
from chat_agent.files.image_fetch import fetch_image
from chat_agent.files.images import MEDIA_TYPES as IMAGE_MEDIA_TYPES
from chat_agent.files.images import ImageError, PreparedImage, image_block, image_format, prepare_image
from chat_agent.files.sniff import EXTENSIONS
from chat_agent.knowledge.records import Hit
from chat_agent.knowledge.scope import KnowledgeScope
from chat_agent.knowledge.service import source_of
from chat_agent.model import LLMError, ModelClient, ModelReply, ModelRequest, TextDelta
from chat_agent.per_loop import PerLoop
from chat_agent.protocol import Highlight
from chat_agent.store import MemoriesRecord
from chat_agent.text import one_line, shorten
from chat_agent.tooling._loading import add_configured_tools
from chat_agent.tooling._registry import ToolRegistry, ToolSource
from chat_agent.tooling.mcp import attach_mcp_servers
from chat_agent.tooling._types import ToolAvailability, ToolContext, ToolResult, ToolServices, ToolUnavailable

__all__ = [
    # the registry and a call's context
    "ToolAvailability", "ToolContext", "ToolRegistry", "ToolResult", "ToolServices", "ToolUnavailable", "Settings",
    # tools beyond the built-in ones: CHAT_AGENT_TOOLS, entry points, MCP servers
    "ToolSource", "add_configured_tools", "attach_mcp_servers",
    # the services a turn lends
    "Canvas", "ConversationFiles", "DocumentLibrary", "Highlight", "ModelClient", "UserMemory",
    # files and images
    "EXTENSIONS", "FileError", "IMAGE_MEDIA_TYPES", "ImageError", "PreparedImage", "StoredFile", "fetch_image",
    "image_block", "image_format", "prepare_image",
    # documents
    "ParsedDocument", "read_parts", "search",
    # knowledge bases
    "Hit", "KnowledgeScope", "source_of",
    # memories
    "MEMORY_ITEM_CHARS", "MemoriesRecord", "clean_item", "item_key",
    # asking a model
    "LLMError", "ModelReply", "ModelRequest", "TextDelta",
    # small helpers
    "PerLoop", "one_line", "shorten",
]
