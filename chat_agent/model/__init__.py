"""The model clients: the one place that speaks a provider's API.

`ModelClient` is the interface the rest of the package uses; `AnthropicClient` implements
it on the anthropic SDK.
"""

from chat_agent.model.anthropic import AnthropicClient
from chat_agent.model.types import (LLMError, ModelClient, ModelReply, ModelRequest, StreamItem, TextDelta,
                                    ThinkingDelta, ToolInputDelta)

__all__ = ["AnthropicClient", "LLMError", "ModelClient", "ModelReply", "ModelRequest", "StreamItem", "TextDelta",
           "ThinkingDelta", "ToolInputDelta"]
