"""A real MCP server (the `mcp` SDK's MCPServer, formerly FastMCP) for the tests of MCP tools.

    python tests/mcp_servers/demo_server.py stdio
    python tests/mcp_servers/demo_server.py http PORT

Its tools: `echo`, `count` (reports progress), `slow` (sleeps; a cancellation is written to the
file named by DEMO_MCP_RECORD, one JSON line per event, so a test can assert that the
server saw it), `picture` (returns an image), `damaged_picture` (a PNG with a bad checksum in
an ancillary chunk, like the reference "everything" server's sample image), `not_a_picture`
(an "image" that is an HTML page) and `crash` (ends the process mid-call).
DEMO_MCP_RECORD also gets a `started` line with the pid each time the server starts.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import struct
import sys
import time

from mcp.server.mcpserver import Context, Image, MCPServer

server = MCPServer("demo")


def record(**event) -> None:
    path = os.environ.get("DEMO_MCP_RECORD")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({**event, "pid": os.getpid(), "at": time.time()}) + "\n")


@server.tool()
def echo(text: str) -> str:
    """Repeat the text back."""
    return f"echo: {text}"


@server.tool()
async def count(to: int, ctx: Context) -> str:
    """Count up to `to`, reporting each step as progress."""
    for n in range(1, to + 1):
        await ctx.report_progress(n, to, f"counted {n} of {to}")
        await asyncio.sleep(0.05)
    return f"counted to {to}"


@server.tool()
async def slow(seconds: float) -> str:
    """Wait that many seconds, then say so."""
    record(event="slow_started")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        record(event="slow_cancelled")
        raise
    record(event="slow_finished")
    return f"waited {seconds} s"


@server.tool()
def picture(color: str = "red") -> list:
    """A small square of the given color, as a PNG, with a caption."""
    from PIL import Image as PILImage

    out = io.BytesIO()
    PILImage.new("RGB", (8, 8), color).save(out, "PNG")
    return [f"a {color} square", Image(data=out.getvalue(), format="png")]


def square(color: str) -> bytes:
    from PIL import Image as PILImage

    out = io.BytesIO()
    PILImage.new("RGB", (8, 8), color).save(out, "PNG")
    return out.getvalue()


@server.tool()
def damaged_picture() -> list:
    """A green square as a PNG whose text chunk (ancillary) has a wrong checksum."""
    png = square("green")
    text = b"Comment\0made by the demo server"
    chunk = struct.pack(">I", len(text)) + b"tEXt" + text + b"\xde\xad\xbe\xef"
    return ["a damaged square", Image(data=png[:33] + chunk + png[33:], format="png")]


@server.tool()
def not_a_picture() -> list:
    """An image content whose bytes are an HTML page."""
    return [Image(data=b"<!doctype html><html><body>Not found</body></html>", format="png")]


@server.tool()
def crash() -> str:
    """End the server process at once (to test restarts)."""
    record(event="crash")
    os._exit(3)


def main() -> None:
    record(event="started", transport=sys.argv[1])
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))


if __name__ == "__main__":
    main()

