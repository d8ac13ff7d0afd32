"""A tool package as pip would install it: found through its `chat_agent.tools` entry point
(tests/tool_plugins/chat_agent_ep_tools-1.0.dist-info, on the path the tests give)."""

from langchain_core.tools import tool


@tool
async def reverse(text: str) -> str:
    """Reverse the text."""
    return text[::-1]
