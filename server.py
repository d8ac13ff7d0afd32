"""Runs chat-agent: `python server.py` (`--help` for its flags). Configuration comes from the
environment and a `.env` file (docs/configuration.md).

This is where the house is put together: the tools (the top-level `tools` package, one
module each) are composed into a registry here and handed to `create_app`, so the core
package never imports them.
"""

from __future__ import annotations

import gc

if __name__ == "__main__":
    # No collection while the modules below load (a fifth of a start's CPU: thousands of
    # classes that live as long as the process, no garbage); `main` turns it back on.
    gc.disable()

import argparse
import asyncio
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Callable

import uvicorn
from dotenv import dotenv_values

import tools
from chat_agent import tracing
from chat_agent.config import ConfigError, Settings
from chat_agent.model.demo import demo_settings
from chat_agent.tooling import ToolRegistry
from chat_agent.web.app import create_app
from chat_agent.web.auth import refuse_open_listen
from chat_agent.web.deadlines import deadline_protocol
from chat_agent.web.wsprotocol import LeanWebSocketProtocol

log = logging.getLogger("chat_agent.server")
YOUNG_GC = 10_000  # allocations between two young collections (see `settle_collector`)


def settle_collector() -> None:
    """Sets the garbage collector up for a server that has loaded what it runs on (also
    `bench/bare_relay.py`'s, so that the floor it measures has no pauses ours has not)."""
    # Everything loaded to start (modules, schemas, the tokenizer, the SDKs) lives as long
    # as the process: out of the collector's sight, a full collection scans only what turns
    # make, in ~1 ms instead of the 130-220 ms pauses that stalled every stream (and every
    # abort) at once under load.
    gc.collect()
    gc.freeze()
    # A young collection every YOUNG_GC allocations, not every 700: what a server keeps per
    # socket and per turn is made in bursts that live on, and collecting after every 700 of
    # them spent ~30% of opening 3,000 sockets in the collector (idle_connections.py:
    # opening 0.68 -> 0.94 of a bare endpoint's rate, memory per socket unchanged).
    gc.set_threshold(YOUNG_GC, *gc.get_threshold()[1:])


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything else starts: a taken port is one clear
    error, not a "ready" followed by uvicorn's traceback."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait out TIME_WAIT
        sock.bind((host, port))
        # Listening at once holds the port: two sockets merely bound with SO_REUSEADDR can
        # share it. Connections wait in the backlog until the app has started.
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


class Server(uvicorn.Server):
    """uvicorn's server, saying where it listens once it accepts connections, and sending
    the last spans once the app has stopped."""

    def __init__(self, config: uvicorn.Config, traces: tracing.Tracing):
        super().__init__(config)
        self.traces = traces

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        settle_collector()
        if self.started and sockets:
            host, port = sockets[0].getsockname()[:2]
            where = _where(host, port)
            log.info("listening on ws://%s/api/chat-agent (the canvas page: http://%s/)", where, where)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)  # the app's own shutdown too: running turns are closed
        # Here, not after `run`: uvicorn ends by raising the signal that stopped it again,
        # and the process dies of it.
        await asyncio.to_thread(self.traces.shutdown)


def _where(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def serve(settings: Settings, sock: socket.socket, registry: ToolRegistry, traces: tracing.Tracing) -> bool:
    """Runs until a signal stops it; whether it got as far as listening."""
    config = uvicorn.Config(
        create_app(settings, registry=registry), lifespan="on",
        ws=LeanWebSocketProtocol,  # uvicorn's own, dropping the handshake once answered
        ws_per_message_deflate=False,  # compression costs CPU and memory per socket; frames are small
        # frames past our own limit get a `too_large` error and the socket stays; only far larger
        # ones are cut off by the protocol layer
        ws_max_size=max(8 * settings.max_frame_bytes, 1 << 24),
        ws_ping_interval=settings.ws_ping_interval, ws_ping_timeout=settings.ws_ping_interval,
        timeout_graceful_shutdown=5, log_level="warning", access_log=False,
        # slow clients: deadlines for a request's head and body (chat_agent/web/deadlines.py)
        http=deadline_protocol(settings.header_timeout, settings.body_timeout, settings.body_min_rate),
    )
    server = Server(config, traces)
    server.run(sockets=[sock])
    return server.started


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="server.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Runs chat-agent: the canvas page at http://HOST:PORT/, the WebSocket at /api/chat-agent.",
        epilog="Every setting is an environment variable (docs/configuration.md lists them all). A .env file\n"
               "is read first without overriding variables already set; a flag overrides both.\n\n"
               "  .venv/bin/python server.py --demo                  # no API key needed\n"
               "  ANTHROPIC_API_KEY=sk-ant-... .venv/bin/python server.py\n"
               "  .venv/bin/python server.py --env-file prod.env --host 0.0.0.0")
    parser.add_argument("--host", help="the address to listen on (CHAT_AGENT_HOST; default 127.0.0.1; any other "
                        "address needs CHAT_AGENT_API_KEYS)")
    parser.add_argument("--port", type=int, help="the port to listen on (CHAT_AGENT_PORT; default 8000)")
    parser.add_argument("--data-dir", help="where the SQLite file and local files live (CHAT_AGENT_DATA_DIR; "
                        "default ./data)")
    parser.add_argument("--demo", action="store_true", help="use the built-in offline demo model (no API key "
                        "needed; also CHAT_AGENT_DEMO=1 when no ANTHROPIC_API_KEY is set)")
    parser.add_argument("--env-file", metavar="PATH", help="read variables from this file (default: .env in the "
                        "current directory, when there is one)")
    parser.add_argument("--log-level", help="DEBUG, INFO, WARNING... (CHAT_AGENT_LOG_LEVEL; default INFO)")
    return parser.parse_args(argv)


def _environment(args: argparse.Namespace) -> dict[str, str]:
    """The variables the settings are read from: the process's own, over the .env file's
    (which join the process's environment too, for what reads it directly: the OpenTelemetry
    SDK, boto3, `${VAR}` in the MCP config), under the flags. Raises ConfigError."""
    path = Path(args.env_file) if args.env_file else Path(".env")
    if args.env_file and not path.is_file():
        raise ConfigError(f"--env-file {args.env_file}: no such file")
    if path.is_file():
        for name, value in dotenv_values(path).items():
            if value is not None and not os.environ.get(name, "").strip():  # empty counts as unset, as in Settings
                os.environ[name] = value
    flags = {"CHAT_AGENT_HOST": args.host, "CHAT_AGENT_PORT": args.port, "CHAT_AGENT_DATA_DIR": args.data_dir,
             "CHAT_AGENT_LOG_LEVEL": args.log_level}
    return {**os.environ, **{name: str(value) for name, value in flags.items() if value is not None}}


def main(build_registry: Callable[[Settings], ToolRegistry] = tools.build_registry,
         argv: list[str] | None = None) -> int:
    gc.enable()
    args = _arguments(sys.argv[1:] if argv is None else argv)
    try:
        environment = _environment(args)
        settings = Settings.from_env(environment)
    except ConfigError as exc:
        print(f"chat-agent: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if logging.getLogger().level > logging.DEBUG:
        # The job queue's two lines per job (started, ended) are for debugging; a job that
        # fails is logged by us, and procrastinate's own trouble is a warning or worse.
        logging.getLogger("procrastinate").setLevel(logging.WARNING)
    if args.demo or settings.demo:
        settings = demo_settings(settings)
        logging.warning("demo mode: replies come from the scripted offline demo model, not a real one")
    elif environment.get("CHAT_AGENT_DEMO", "").strip().lower() in {"1", "true", "yes", "on"}:
        logging.warning("CHAT_AGENT_DEMO is ignored: ANTHROPIC_API_KEY is set (start with --demo to use the "
                        "demo model anyway)")
    refusal = refuse_open_listen(settings)
    if refusal:
        print(f"chat-agent: {refusal}", file=sys.stderr)
        return 2
    try:
        registry = build_registry(settings)
    except ConfigError as exc:  # a tool entry or the MCP config is wrong: one clear line
        print(f"chat-agent: {exc}", file=sys.stderr)
        return 2
    try:
        sock = bind(settings.host, settings.port)
    except OSError as exc:
        print(f"chat-agent: cannot listen on {_where(settings.host, settings.port)}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    if not settings.anthropic_api_key and not settings.demo:
        logging.warning("ANTHROPIC_API_KEY is not set: the server runs, but turns will answer llm_error")
    traces = tracing.start()  # OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set; else nothing
    try:
        with sock:
            return 0 if serve(settings, sock, registry, traces) else 3
    finally:
        traces.shutdown()  # when the server never started; after a shutdown there is nothing left


if __name__ == "__main__":
    sys.exit(main())
