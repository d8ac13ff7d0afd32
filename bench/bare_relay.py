"""The baseline for `bench/relay.py`: the least a WebSocket relay of a streamed reply can do.

A bare Starlette WebSocket endpoint that, for each incoming `message`, streams a reply from
the (fake) Anthropic API with the anthropic SDK and sends each text delta as one JSON frame,
then a `done` frame. No history, no store, no event log, no validation. Served by uvicorn
exactly as `server.py` serves ours (per-message-deflate off, same loop/http/ws choices), and
calling the API through the same HTTP client (the SDK's aiohttp one) with the same request
as ours: the system prompt and the tools the same configuration gives ours (from the same
environment), so the fake upstream, which shares the machine's two cores, has the same work
per request for both, and only what the relays do differs.

    ANTHROPIC_BASE_URL=... ANTHROPIC_API_KEY=... python bench/bare_relay.py --port 8765
"""

from __future__ import annotations

import argparse
import json
import os
from contextlib import asynccontextmanager

import sys
from pathlib import Path

import anthropic
import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route, WebSocketRoute
from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from chat_agent.config import Settings  # noqa: E402
from chat_agent.context.prompting import cached_tools, system_blocks  # noqa: E402
from chat_agent.context.prompts import SYSTEM_PROMPT  # noqa: E402
from tools import build_registry  # noqa: E402

MODEL = os.environ.get("CHAT_AGENT_MODEL") or "claude-sonnet-4-5"
MAX_TOKENS = 8192  # what our server asks for by default


def request_extras() -> dict:
    """What our server sends besides the message: the system prompt and the tool schemas."""
    settings = Settings.from_env()
    return {"system": system_blocks(SYSTEM_PROMPT, prefix=True, memories=None),
            "tools": cached_tools(build_registry(settings).schemas())}


def build_app() -> Starlette:
    state: dict[str, anthropic.AsyncAnthropic] = {}
    extras = request_extras()

    @asynccontextmanager
    async def lifespan(app: Starlette):
        # The same HTTP client as ours (chat_agent/model/anthropic.py).
        state["client"] = anthropic.AsyncAnthropic(max_retries=0, http_client=anthropic.DefaultAioHttpClient())
        yield
        await state["client"].close()

    async def relay(ws: WebSocket) -> None:
        await ws.accept()
        await ws.send_text(json.dumps({"type": "session"}))  # same handshake shape as ours
        client = state["client"]
        try:
            while True:
                frame = json.loads(await ws.receive_text())
                if frame.get("type") != "message":
                    continue
                async with client.messages.stream(model=MODEL, max_tokens=MAX_TOKENS, **extras, messages=[
                        {"role": "user", "content": frame["content"]}]) as stream:
                    async for event in stream:
                        if event.type == "text":
                            await ws.send_text(json.dumps({"type": "content_chunk", "content": event.text}))
                    final = await stream.get_final_message()
                await ws.send_text(json.dumps({"type": "done", "stopReason": final.stop_reason}))
        except WebSocketDisconnect:
            pass

    async def health(request):
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/health", health), WebSocketRoute("/api/chat-agent", relay)], lifespan=lifespan)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("CHAT_AGENT_PORT", "8765")))
    args = parser.parse_args()
    # The same uvicorn settings as server.py.
    uvicorn.run(build_app(), host=args.host, port=args.port, lifespan="on", ws_per_message_deflate=False,
                ws_max_size=1 << 24, ws_ping_interval=20.0, ws_ping_timeout=20.0,
                timeout_graceful_shutdown=5, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
