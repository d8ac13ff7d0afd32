"""The model clients: the one place that speaks a provider's API.

`ModelClient` is the interface the rest of the package uses; `AnthropicClient` implements
it on the anthropic SDK, `OpenAIClient` (chat_agent.model.openai) on the openai SDK for
every OpenAI-compatible API, and `model_client(settings)` routes each request by its
model's provider prefix.
"""

from chat_agent.config import Settings
from chat_agent.model.anthropic import AnthropicClient
from chat_agent.model.router import ModelRouter
from chat_agent.model.types import (CitationDelta, LLMError, ModelClient, ModelReply, ModelRequest, Retry, StreamItem,
                                    TextDelta, ThinkingDelta, ToolInputDelta)


def _openai(settings: Settings) -> ModelClient:
    # Imported only when a configured model needs it: the SDK takes a while to import.
    from chat_agent.model.openai import OpenAIClient
    return OpenAIClient(settings)


def model_client(settings: Settings) -> ModelRouter:
    """The server's model client: a client per provider the configured models use."""
    return ModelRouter(settings, {"anthropic": AnthropicClient, "openai": _openai})


__all__ = ["AnthropicClient", "CitationDelta", "LLMError", "ModelClient", "ModelReply", "ModelRequest", "ModelRouter", "Retry",
           "StreamItem", "TextDelta", "ThinkingDelta", "ToolInputDelta", "model_client"]
