"""Builds the Starlette app. Everything is created here, per app, and injected: nothing is
set up at import, and tests or embedders can hand in their own store, model client or tools."""

from __future__ import annotations

import logging
import uuid
from contextlib import AsyncExitStack, asynccontextmanager
from importlib.metadata import version as package_version
from typing import Any, AsyncIterator

from starlette.applications import Starlette
from starlette.routing import WebSocketRoute

from chat_agent.agent.loop import Agent
from chat_agent.config import ConfigError, Settings
from chat_agent.context.tokens import TokenCounter
from chat_agent.files.catalog import open_files
from chat_agent.knowledge import create_knowledge
from chat_agent.knowledge.service import INDEX
from chat_agent.model import ModelClient, model_client
from chat_agent.model.demo import DemoModel
from chat_agent.quotas import create_quotas
from chat_agent.sessions.bus import create_bus
from chat_agent.sessions.hub import Hub
from chat_agent.sessions.pg_queue import ProcrastinateQueue
from chat_agent.sessions.queue import Job, JobQueue, LocalQueue
from chat_agent.store import Store, StoreWriter, create_store
from chat_agent.store.pg_pool import side_pool_size
from chat_agent.tooling import ToolRegistry
from chat_agent.urgency import Urgency
from chat_agent.web import (agui_routes, aisdk_routes, canvas_routes, conversation_routes, history_routes, http,
                            image_proxy, knowledge_routes, page, tree_routes, upload_routes)
from chat_agent.web.auth import Authenticator
from chat_agent.web.errors import EXCEPTION_HANDLERS
from chat_agent.web.origins import browser_middleware
from chat_agent.web.backlog import Backlogs
from chat_agent.web.ws import chat_endpoint
from chat_agent.web.wsprotocol import URGENCY

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None, *, registry: ToolRegistry | None = None,
               store: Store | None = None, model: ModelClient | None = None) -> Starlette:
    """The app. `registry` is the tools the model may call (server.py composes it from the
    top-level `tools` package); without one the agent only talks."""
    settings = settings or Settings.from_env()
    tools = registry if registry is not None else ToolRegistry(default_timeout=settings.tool_timeout,
                                                                 output_chars=settings.tool_output_chars)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        # Each part is closed in the reverse order it was opened, also when a later one fails to start.
        async with AsyncExitStack() as stack:
            the_store = store or create_store(settings.database_url, settings.data_dir,
                                                      pool_size=settings.database_pool_size)
            await the_store.open()
            stack.push_async_callback(the_store.close)
            quotas = create_quotas(settings, the_store)
            await quotas.start()
            stack.push_async_callback(quotas.close)
            auth = Authenticator(settings)
            stack.push_async_callback(auth.close)
            urgency = Urgency()  # what a client waits for goes first: the streams and bulk commits pause
            writer = StoreWriter(the_store, urgency=urgency)
            writer.start()
            stack.push_async_callback(writer.close)
            the_model = model or (DemoModel() if settings.demo else model_client(settings))
            stack.push_async_callback(the_model.close)
            files = open_files(settings, the_store, writer)
            stack.push_async_callback(files.close)
            await tools.start()  # MCP servers: one that is down shows its tools disabled, never stops us
            stack.push_async_callback(tools.close)
            knowledge = create_knowledge(settings, the_store, files)
            if knowledge is not None:
                await knowledge.start()
                stack.push_async_callback(knowledge.close)
            bus = create_bus(settings.instance_id or uuid.uuid4().hex[:16], settings.database_url, settings.redis_url)
            hub = Hub(settings, the_store, writer, Agent(the_model, tools, settings, urgency), TokenCounter(), files,
                      bus=bus, queue=_job_queue(settings, bus.instance), knowledge=knowledge)
            if knowledge is not None:  # before the queue starts: a waiting index job may be due at once
                hub.jobs.handle(INDEX, knowledge.index)
                knowledge.use_queue(lambda owner, key: hub.jobs.queue.defer(Job(INDEX, owner, key), 0))
            await stack.enter_async_context(hub.running())
            await _check_shared_files(settings, hub)
            await hub.start_work()
            app.state.hub = hub
            # The version read once: the package's metadata is found by scanning sys.path (~3 ms).
            app.state.health = http.HealthDetails(package_version("chat-agent"))
            app.state.auth = auth
            app.state.quotas = quotas
            app.state.knowledge = knowledge
            app.state.backlogs = Backlogs(settings.max_backlog_bytes, settings.max_connection_backlog_bytes)
            log.info("chat-agent ready: instance %s, model %s, tools %s", bus.instance, settings.model,
                     ", ".join(tools.enabled()) or "none")
            yield {URGENCY: urgency}  # (the socket protocol's, to begin an abort's urgency as it is read)

    # The socket first: every connection is matched against the routes before it, in order
    # (~30 of them; 9% of a socket's opening CPU). Its path is no other route's.
    routes = [WebSocketRoute("/api/chat-agent", chat_endpoint), *http.routes, *history_routes.routes,
              *canvas_routes.routes, *upload_routes.routes, *agui_routes.routes, *aisdk_routes.routes,
              *knowledge_routes.routes, *image_proxy.routes, *tree_routes.routes, *conversation_routes.routes,
              *page.routes]
    return Starlette(routes=routes, lifespan=lifespan, middleware=browser_middleware(settings),
                     exception_handlers=EXCEPTION_HANDLERS)


def _on_postgres(settings: Settings) -> bool:
    return (settings.database_url or "").lower().startswith("postgres")


def _job_queue(settings: Settings, instance: str) -> JobQueue:
    """Background jobs wait in PostgreSQL where instances share it (each due job runs once,
    on any of them), else in this process."""
    if _on_postgres(settings):
        return ProcrastinateQueue(settings.database_url or "", instance=instance,
                                  pool_size=side_pool_size(settings.database_pool_size))
    return LocalQueue()


async def _check_shared_files(settings: Settings, hub: Hub) -> None:
    """Instances on PostgreSQL may run on different machines: files in a local directory
    would be found by one instance and not by another, so several need S3. (On SQLite they
    share one machine, and so its data directory.)"""
    if settings.s3_bucket or not _on_postgres(settings):
        return
    others = await hub.ownership.others()
    if others:
        raise ConfigError(
            f"{len(others)} other instance(s) of chat-agent run on this database ({', '.join(others)}), and this "
            "one keeps files in its local data directory, which the others cannot read: with several "
            "instances, keep files in S3 (set CHAT_AGENT_S3_BUCKET on every instance)")
