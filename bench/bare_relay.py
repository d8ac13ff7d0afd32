"""The baseline for `bench/relay.py`: the least a WebSocket relay of a streamed reply can do.

A bare Starlette WebSocket endpoint that, for each incoming `message`, streams a reply from
the (fake) Anthropic API with the anthropic SDK and relays its text the way ours does, with
nothing else: the deltas of each ~50 ms are merged into one `content_chunk` (the first after
a quiet spell goes out at once; chat_agent/sessions/coalesce.py, the same code as ours),
one task per socket writes the frames, and the stream lets other sockets' work in every
1 ms as ours does (chat_agent/model/fair.py). Then a `done` frame. The conversation is kept
in a list per socket and sent with each message, as any chat relay must; no store, no event
log, no validation: the floor a relay at our cadence can reach. (Sending one frame per delta
instead measured the frame count, not the relay.) Served by uvicorn exactly as `server.py`
serves ours (per-message-deflate off, same loop/http/ws choices), and calling the API through
the same HTTP client (the SDK's aiohttp one), reading its events as the API's JSON as ours
does, with the same request as ours: the model, the system prompt, the tools the same
configuration gives ours (from the same environment) and the conversation so far, its
messages as lists of blocks with the cache breakpoint on the last one, so the fake upstream,
which shares the machine's two cores, has the same work per request for both, and only what
the relays do differs.

    ANTHROPIC_BASE_URL=... ANTHROPIC_API_KEY=... python bench/bare_relay.py --port 8765
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections import deque
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
from chat_agent.config import Settings, split_model  # noqa: E402
from chat_agent.context.prompting import cached_tools, system_blocks, with_breakpoint  # noqa: E402
from chat_agent.context.prompts import SYSTEM_PROMPT  # noqa: E402
from chat_agent.model.anthropic import LIMITS  # noqa: E402
from chat_agent.model.fair import FairShare  # noqa: E402
from chat_agent.protocol import ContentChunk  # noqa: E402
from chat_agent.sessions.coalesce import DeltaCoalescer  # noqa: E402
from chat_agent.sessions.prepare import SEARCH_KNOWLEDGE  # noqa: E402
from server import settle_collector  # noqa: E402
from tools import build_registry  # noqa: E402

MAX_TOKENS = 8192  # what our server asks for by default
EVENTS = anthropic.AsyncStream[object]  # each event the API's JSON, as chat_agent/model/anthropic.py reads them


def request_extras() -> dict:
    """What our server sends besides the messages: the model, the system prompt and the
    tool schemas, those of a message that names no knowledge collection (as the relay's)."""
    settings = Settings.from_env()
    tools = [schema for schema in build_registry(settings).schemas() if schema["name"] != SEARCH_KNOWLEDGE]
    return {"model": split_model(settings.model)[1], "system": system_blocks(SYSTEM_PROMPT, prefix=True, memories=None),
            "tools": cached_tools(tools)}


def text_message(role: str, text: str) -> dict:
    """A message as ours sends it: a list of blocks, not a bare string."""
    return {"role": role, "content": [{"type": "text", "text": text}]}


def build_app() -> Starlette:
    state: dict[str, anthropic.AsyncAnthropic] = {}
    extras = request_extras()

    @asynccontextmanager
    async def lifespan(app: Starlette):
        # The same HTTP client as ours (chat_agent/model/anthropic.py), with its pool limits: with
        # the SDK's (idle connections kept 5 s, as long as the fake keeps them) a request now and
        # then went out on a connection the fake was closing, and a whole run's warm-up failed.
        state["client"] = anthropic.AsyncAnthropic(max_retries=0, http_client=anthropic.DefaultAioHttpClient(
            limits=LIMITS))
        # The collector set up as ours: left at Python's defaults, this process (which loads
        # the same tools and SDKs) paused ~150 ms for a full collection now and then, in the
        # middle of a timed round: a floor with pauses ours does not have.
        settle_collector()
        yield
        await state["client"].close()

    async def relay(ws: WebSocket) -> None:
        await ws.accept()
        await ws.send_text(json.dumps({"type": "session"}))  # same handshake shape as ours
        out: deque[str] = deque()
        wake = asyncio.Event()

        def emit(frame: ContentChunk) -> None:
            out.append(json.dumps({"type": "content_chunk", "content": frame.content}))
            wake.set()

        async def send_loop() -> None:
            while True:
                await wake.wait()
                wake.clear()
                while out:
                    await ws.send_text(out.popleft())

        sender = asyncio.create_task(send_loop())
        client = state["client"]
        history: list[dict] = []  # the conversation so far, sent with each message as ours sends it
        try:
            while True:
                frame = json.loads(await ws.receive_text())
                if frame.get("type") != "message":
                    continue
                history.append(text_message("user", frame["content"]))
                coalescer = DeltaCoalescer(emit)
                stop_reason, text = None, []
                # The events as the API's JSON, as ours reads them (the SDK's `post` with `object`
                # as the event type): no SDK object per event, work the floor need not do.
                async with await client.post("/v1/messages", cast_to=object, stream=True, stream_cls=EVENTS,
                                             body={"max_tokens": MAX_TOKENS, **extras, "stream": True,
                                                   "messages": with_breakpoint(history)}) as events:
                    fair = FairShare()
                    async for event in events:
                        if event["type"] == "content_block_delta" and event["delta"]["type"] == "text_delta":
                            text.append(event["delta"]["text"])
                            coalescer.offer(ContentChunk(message_id="m", content=event["delta"]["text"]))
                        elif event["type"] == "message_delta":
                            stop_reason = event["delta"].get("stop_reason")
                        await fair.take_turns()
                coalescer.flush()
                history.append(text_message("assistant", "".join(text) or "(no reply)"))
                out.append(json.dumps({"type": "done", "stopReason": stop_reason}))
                wake.set()
        except WebSocketDisconnect:
            pass
        finally:
            sender.cancel()

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
