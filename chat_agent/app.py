"""Builds the Starlette app. Everything is created here, per app, and injected: nothing is
set up at import, and tests or embedders can hand in their own store, model client or tools."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator

from starlette.applications import Starlette
from starlette.routing import WebSocketRoute

from . import http, http_canvas, http_uploads
from .config import Settings
from .files import open_files
from .hub import Hub
from .llm import ModelClient
from .loop import Agent
from .recovery import recover
from .store import Store, create_store
from .tokens import TokenCounter
from .tools import ToolRegistry
from .writer import StoreWriter
from .ws import chat_endpoint

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None, *, store: Store | None = None,
               model: ModelClient | None = None, registry: ToolRegistry | None = None) -> Starlette:
    settings = settings or Settings.from_env()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        from tools import build_registry  # the tool modules live beside the package

        the_store = store or create_store(settings.database_url, settings.data_dir)
        await the_store.open()
        writer = StoreWriter(the_store)
        writer.start()
        the_model = model or ModelClient(settings)
        agent = Agent(the_model, registry or build_registry(settings), settings)
        hub = Hub(settings, the_store, writer, agent, TokenCounter(), open_files(settings, the_store, writer))
        await recover(hub)
        app.state.hub = hub
        log.info("chat-agent ready: model %s, tools %s", settings.model, ", ".join(agent.registry.enabled()) or "none")
        try:
            yield
        finally:
            await hub.shutdown()
            await hub.files.close()
            await writer.close()
            await the_store.close()
            await the_model.close()

    routes = [*http.routes, *http_canvas.routes, *http_uploads.routes, WebSocketRoute("/api/chat-agent", chat_endpoint)]
    return Starlette(routes=routes, lifespan=lifespan)
