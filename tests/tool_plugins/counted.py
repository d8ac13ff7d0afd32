"""Tools that count their runs (CHAT_AGENT_TOOLS=`tests.tool_plugins.counted:both`), for the
tests of turns that continue after a failure: each run appends its name to the file named by
COUNTED_TOOLS_FILE, then waits while the file named by COUNTED_TOOLS_HOLD exists (a test lets
them finish by deleting it). `fetch_page` declares itself safe to repeat; `send_email` does not."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from langchain_core.tools import tool


async def _run(name: str, arg: str) -> str:
    with Path(os.environ["COUNTED_TOOLS_FILE"]).open("a") as record:
        record.write(f"{name} {arg}\n")
    hold = Path(os.environ["COUNTED_TOOLS_HOLD"])
    while hold.exists():
        await asyncio.sleep(0.05)
    return f"{name} done: {arg}"


@tool
async def send_email(to: str) -> str:
    """Send an email (changes the world: never run twice)."""
    return await _run("send_email", to)


@tool
async def fetch_page(url: str) -> str:
    """Read a web page (only reads: safe to run again)."""
    return await _run("fetch_page", url)


fetch_page.metadata = {"repeatable": True}

both = [send_email, fetch_page]
