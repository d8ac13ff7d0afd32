"""Third-party tools as CHAT_AGENT_TOOLS names them (`tests.tool_plugins.configured:ATTRIBUTE`):
plain LangChain tools, unchanged, of every kind the registry takes."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

from langchain_core.tools import InjectedToolArg, StructuredTool, tool

from chat_agent.tooling import Settings, ToolContext, ToolUnavailable


@tool
def shout(text: str) -> str:
    """Say the text in capitals (a sync @tool)."""
    return text.upper()


@tool
def nap(seconds: float, ctx: Annotated[ToolContext, InjectedToolArg]) -> str:
    """Block for that many seconds (a sync tool that takes its time), reporting progress."""
    ctx.progress(f"napping {seconds:g} s")
    time.sleep(seconds)
    return f"napped {seconds:g} s"


async def _add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


adder = StructuredTool.from_function(coroutine=_add, name="adder", description="Add two integers (async).")

both = [shout, nap]  # a list


def factory(settings: Settings) -> list:
    """A factory taking the settings."""

    @tool
    def model_name() -> str:
        """The main model this server uses."""
        return settings.model

    return [model_name]


def needs_a_key(settings: Settings):
    raise ToolUnavailable("WEATHER_API_KEY is not set")


not_a_tool = 42


@tool
def web_search(query: str) -> str:
    """Clashes with the built-in web_search."""
    return query
