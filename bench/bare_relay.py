"""The baseline for `bench/relay.py`: the least a WebSocket relay of a streamed reply can do.

A bare Starlette WebSocket endpoint that, for each incoming `message`, streams a reply from
the (fake) Anthropic API with the anthropic SDK and sends each text delta as one JSON frame,
then a `done` frame. No history, no store, no event log, no validation. Served by uvicorn
exactly as `server.py` serves ours (per-message-deflate off, same loop/http/ws choices).

    ANTHROPIC_BASE_URL=... ANTHROPIC_API_KEY=... python bench/bare_relay.py --port 8765
"""

from __future__ import annotations

import argparse
import json
import os
from contextlib import asynccontextmanager

import anthropic
import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route, WebSocketRoute
from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

MODEL = os.environ.get("CHAT_AGENT_MODEL") or "claude-sonnet-4-5"
MAX_TOKENS = 8192  # what our server asks for by default


def build_app() -> Starlette:
    state: dict[str, anthropic.AsyncAnthropic] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette):
        state["client"] = anthropic.AsyncAnthropic(max_retries=0)
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
                async with client.messages.stream(model=MODEL, max_tokens=MAX_TOKENS, messages=[
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
