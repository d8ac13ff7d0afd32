"""The Tool Registry's public API: what the loop calls and what tools import.

A tool is a LangChain tool: `@tool` on a typed async function with a docstring, or
any `BaseTool`. Our own tools take the call's context through an injected argument
the model never sees, and raise on failure (the registry makes it an is_error
result)::

    @tool(response_format="content_and_artifact")
    async def web_search(query: str, ctx: Annotated[ToolContext, InjectedToolArg]) -> tuple[str, dict]:
        \"\"\"Search the web.\"\"\"
        ctx.progress(f"Searching the web for {query}")
        ...
        return text_for_the_model, value_for_the_ui
"""

from chat_agent.tooling._registry import ToolRegistry
from chat_agent.tooling._types import ToolAvailability, ToolContext, ToolResult, ToolUnavailable

__all__ = ["ToolAvailability", "ToolContext", "ToolRegistry", "ToolResult", "ToolUnavailable"]
