"""Runs chat-agent: `python server.py`. Configuration comes from the environment (README).

This is where the house is put together: the tools (the top-level `tools` package, one
module each) are composed into a registry here and handed to `create_app`, so the core
package never imports them.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Callable

import uvicorn

import tools
from chat_agent.config import ConfigError, Settings
from chat_agent.tooling import ToolRegistry
from chat_agent.web.app import create_app
from chat_agent.web.auth import refuse_open_listen


def main(build_registry: Callable[[Settings], ToolRegistry] = tools.build_registry) -> int:
    logging.basicConfig(level=os.environ.get("CHAT_AGENT_LOG_LEVEL", "INFO").upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"chat-agent: {exc}", file=sys.stderr)
        return 2
    refusal = refuse_open_listen(settings)
    if refusal:
        print(f"chat-agent: {refusal}", file=sys.stderr)
        return 2
    if not settings.anthropic_api_key:
        logging.warning("ANTHROPIC_API_KEY is not set: the server runs, but turns will answer llm_error")
    uvicorn.run(
        create_app(settings, registry=build_registry(settings)), host=settings.host, port=settings.port,
        lifespan="on",
        ws_per_message_deflate=False,  # compression costs CPU and memory per socket; frames are small
        # frames past our own limit get a `too_large` error and the socket stays; only far larger
        # ones are cut off by the protocol layer
        ws_max_size=max(8 * settings.max_frame_bytes, 1 << 24),
        ws_ping_interval=settings.ws_ping_interval, ws_ping_timeout=settings.ws_ping_interval,
        timeout_graceful_shutdown=5, log_level="warning", access_log=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
