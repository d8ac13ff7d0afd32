"""One ModelClient in front of several: each request goes to the client of its model's
provider (`openai:gpt-4.1` → the OpenAI-compatible client, asked for `gpt-4.1`; a bare name
→ Anthropic). Only the providers the configured models use get a client."""

from __future__ import annotations

import dataclasses
from typing import AsyncIterator, Callable, Mapping

from chat_agent.config import PROVIDERS, Settings, split_model
from chat_agent.model.types import LLMError, ModelClient, ModelReply, ModelRequest, StreamItem

NO_KEY = "The server has no {key}, so it cannot reach {model}."


class ModelRouter:
    """`clients`: provider name → a factory of its client, called once for each provider in use."""

    def __init__(self, settings: Settings, clients: Mapping[str, Callable[[Settings], ModelClient]]):
        self._clients = {provider: clients[provider](settings) for provider in settings.providers()}
        main = split_model(settings.model)[0]
        self.configured = self._clients[main].configured

    def unavailable(self, model: str) -> str | None:
        try:
            provider, bare = split_model(model)
        except ValueError:
            return None  # not a model of this server: whoever checks the name says so
        client = self._clients.get(provider)
        if client is None:
            return f"No configured model uses the {provider} provider."
        if not client.configured:
            return NO_KEY.format(key=PROVIDERS[provider], model=model)
        return None

    def _route(self, request: ModelRequest) -> tuple[ModelClient, ModelRequest]:
        reason = self.unavailable(request.model)
        if reason is not None:
            raise LLMError("llm_error", reason)
        try:
            provider, bare = split_model(request.model)
        except ValueError as exc:
            raise LLMError("llm_error", f"Model {exc}") from None
        return self._clients[provider], dataclasses.replace(request, model=bare)

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        try:
            client, routed = self._route(request)
        except LLMError as exc:
            return _raising(exc)
        return client.stream(routed)  # the client's own stream: closing it closes the call

    async def call(self, request: ModelRequest) -> ModelReply:
        client, routed = self._route(request)
        return await client.call(routed)

    async def complete(self, request: ModelRequest) -> str:
        client, routed = self._route(request)
        return await client.complete(routed)

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()


async def _raising(exc: LLMError) -> AsyncIterator[StreamItem]:
    raise exc
    yield  # an async generator that fails when iterated, as a stream would
