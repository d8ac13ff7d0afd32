"""The Messages API wire format: a scripted `Reply` as SSE events or as one Message JSON,
and usage numbers (token estimates and prompt-cache accounting)."""

from __future__ import annotations

import hashlib
import json
import math
import random
import threading
from dataclasses import dataclass
from typing import Any

from tests.fakes.anthropic_script import (Block, CitedText, RedactedThinking, Reply, Signer, Text, Thinking, ToolUse,
                                         new_id)
from tests.fakes.anthropic_turns import blocks_of

CACHE_LOOKBACK_BLOCKS = 20  # the real API looks this far back from a breakpoint for a hit
PING_EVERY = 12  # content events between pings after the first one


def tokens(chars: int) -> int:
    return math.ceil(chars / 4)


def dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


# -- content: a Reply's blocks with ids and signatures filled in -----------------------------


def materialize(reply: Reply, signer: Signer, body: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The Message `content` list for this reply, with fresh ids and server-issued signatures;
    a cited text's citation names a search result of the request `body`."""
    last = len(reply.blocks) - 1
    return [_block_json(block, signer, body or {}, cut=reply.cut and n == last) for n, block in enumerate(reply.blocks)]


def search_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's `search_result` blocks in order, those inside tool results included."""
    found = []
    for message in body.get("messages") or []:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "search_result":
                found.append(block)
            elif block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                found += [b for b in block["content"] if b.get("type") == "search_result"]
    return found


def _citation(body: dict[str, Any], result: int, quote: str | None) -> dict[str, Any]:
    results = search_results(body)
    if not 0 <= result < len(results):
        raise ValueError(f"the script cites search result {result}, and the request has {len(results)}")
    found = results[result]
    texts = [b.get("text", "") for b in found.get("content") or []]
    return {"type": "search_result_location", "source": found["source"], "title": found.get("title"),
            "cited_text": quote if quote is not None else "\n".join(texts), "search_result_index": result,
            "start_block_index": 0, "end_block_index": max(0, len(texts) - 1)}


def _block_json(block: Block, signer: Signer, body: dict[str, Any], *, cut: bool = False) -> dict[str, Any]:
    match block:
        case Text(text):
            return {"type": "text", "text": text}
        case CitedText(text, result, quote):
            return {"type": "text", "text": text, "citations": [_citation(body, result, quote)]}
        case ToolUse(name, tool_input, block_id):
            return {"type": "tool_use", "id": block_id or new_id("toolu_01"), "name": name, "input": tool_input}
        case Thinking(thinking, signature):
            # Thinking cut by the output limit is never signed: the signature comes last.
            sig = "" if cut else signature if signature is not None else signer.sign(thinking)
            return {"type": "thinking", "thinking": thinking, "signature": sig}
        case RedactedThinking(data):
            return {"type": "redacted_thinking", "data": data or signer.redacted_data()}
    raise TypeError(f"not a content block: {block!r}")


def output_tokens(content: list[dict[str, Any]]) -> int:
    chars = sum(len(b.get("text") or b.get("thinking") or b.get("data") or "") for b in content)
    chars += sum(len(json.dumps(b["input"])) for b in content if b["type"] == "tool_use")
    return max(1, tokens(chars))


# -- SSE events ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SSE:
    event: str
    data: dict[str, Any]

    def encode(self) -> bytes:
        payload = json.dumps(self.data) if self.event == "ping" else dumps(self.data)
        return f"event: {self.event}\ndata: {payload}\n\n".encode()


PING = SSE("ping", {"type": "ping"})


def message_json(message_id: str, model: str, content: list[dict[str, Any]], reply: Reply, usage: dict) -> dict:
    message = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reply.final_stop_reason,
        "stop_sequence": reply.stop_sequence,
        "usage": usage,
    }
    if reply.stop_details is not None:
        message["stop_details"] = reply.stop_details
    return message


def stream_events(message: dict[str, Any], reply: Reply) -> list[SSE]:
    """The SSE events the real API would send for `message`, pings included."""
    start_usage = {**message["usage"], "output_tokens": 1}
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage}
    start.pop("stop_details", None)  # known only at the end
    events = [SSE("message_start", {"type": "message_start", "message": start})]
    blocks, last = reply.blocks, len(reply.blocks) - 1
    for index, block in enumerate(message["content"]):
        raw = blocks[index].raw_json if isinstance(blocks[index], ToolUse) else None
        events += _block_events(index, block, reply.chunk_size, raw_json=raw, cut=reply.cut and index == last)
        if index == 0:
            events.insert(2, PING)  # the real API pings right after the first block opens
    events = _interleave_pings(events)
    usage = {k: v for k, v in message["usage"].items() if k != "cache_creation" and k != "service_tier"}
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    if "stop_details" in message:
        delta["stop_details"] = message["stop_details"]
    events.append(SSE("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
    events.append(SSE("message_stop", {"type": "message_stop"}))
    return events


def _interleave_pings(events: list[SSE]) -> list[SSE]:
    out: list[SSE] = []
    for n, event in enumerate(events):
        if n > 3 and n % PING_EVERY == 0:
            out.append(PING)
        out.append(event)
    return out


def _block_events(
    index: int, block: dict[str, Any], chunk_size: int | None, *, raw_json: str | None = None, cut: bool = False
) -> list[SSE]:
    """A block's start, deltas and stop. `raw_json` streams instead of the input's JSON; a
    `cut` block ends where the output limit struck (see `Reply.cut`)."""

    def delta(d: dict[str, Any]) -> SSE:
        return SSE("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})

    kind = block["type"]
    deltas: list[SSE] = []
    if kind == "text":
        opening = {"type": "text", "text": ""}
        deltas = [delta({"type": "text_delta", "text": p}) for p in split_text(block["text"], chunk_size)]
        deltas += [delta({"type": "citations_delta", "citation": c}) for c in block.get("citations") or []]
    elif kind == "tool_use":
        opening = {**block, "input": {}}
        pieces = _json_pieces(block, chunk_size, raw_json)
        deltas = [delta({"type": "input_json_delta", "partial_json": p}) for p in pieces]
    elif kind == "thinking":
        opening = {"type": "thinking", "thinking": "", "signature": ""}
        pieces = split_text(block["thinking"], chunk_size)
        deltas = [delta({"type": "thinking_delta", "thinking": p}) for p in pieces]
        if not cut:
            deltas.append(delta({"type": "signature_delta", "signature": block["signature"]}))
    else:
        opening = block  # redacted_thinking arrives whole in its start event
    start = SSE("content_block_start", {"type": "content_block_start", "index": index, "content_block": opening})
    stop = SSE("content_block_stop", {"type": "content_block_stop", "index": index})
    if cut and kind == "tool_use":
        return [start, *deltas]  # as the API does when the limit strikes inside a call's JSON
    return [start, *deltas, stop]


def split_text(text: str, chunk_size: int | None) -> list[str]:
    """Fixed-size pieces, or word by word (each word keeps its trailing space) by default."""
    if chunk_size:
        return [text[i : i + chunk_size] for i in range(0, len(text), chunk_size)] or [""]
    pieces: list[str] = []
    for word in text.split(" "):
        pieces.append(word + " ")
    pieces[-1] = pieces[-1][:-1]
    return [p for p in pieces if p] or [""]


def _json_pieces(block: dict[str, Any], chunk_size: int | None, raw_json: str | None = None) -> list[str]:
    """The real API opens with an empty piece, then cuts the JSON anywhere, mid-string included."""
    if raw_json is None and not block["input"]:
        return [""]  # a tool with no arguments streams no JSON at all; the SDK keeps `{}`
    text = raw_json if raw_json is not None else json.dumps(block["input"], ensure_ascii=False)
    if chunk_size:
        return [""] + [text[i : i + chunk_size] for i in range(0, len(text), chunk_size)]
    rng = random.Random(block["id"])  # irregular but reproducible for a given id
    pieces, at = [""], 0
    while at < len(text):
        size = rng.randint(1, 16)
        pieces.append(text[at : at + size])
        at += size
    return pieces


# -- usage: token estimates and prompt caching ----------------------------------------------------


class PromptCache:
    """Prefixes this server has cached, keyed by a running hash over the request's blocks.

    As the real API documents it: a hit is a prefix (tools, then system, then messages) that
    ended at a breakpoint of an earlier request, found by looking back at most 20 blocks from
    a breakpoint of this one; a prefix shorter than the model's minimum is never cached; and
    the messages part is keyed by `tool_choice` and the thinking settings too (changing either
    keeps the tools and system cache but misses every message block)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def usage(self, body: dict[str, Any]) -> dict[str, Any]:
        segments, head = _segments(body), _head_length(body)
        hashes, sizes = _prefix_hashes(body, segments, head), _prefix_sizes(segments)
        breakpoints = [i for i, (_, marked) in enumerate(segments) if marked]
        if body.get("cache_control") and segments:
            breakpoints.append(len(segments) - 1)  # top-level cache_control marks the last block
        minimum = min_cacheable_tokens(body["model"])
        breakpoints = [b for b in breakpoints if tokens(sizes[b]) >= minimum]  # too short: silently not cached
        total = max(1, tokens(sizes[-1] if sizes else 0))
        if not breakpoints:
            return usage_dict(total, 0, 0)
        with self._lock:
            hit = self._longest_hit(hashes, breakpoints)
            self._seen.update(hashes[b] for b in breakpoints)
        cached = tokens(sizes[max(breakpoints)])
        read = tokens(sizes[hit]) if hit is not None else 0
        return usage_dict(max(0, total - cached), cached - read, read)

    def _longest_hit(self, hashes: list[str], breakpoints: list[int]) -> int | None:
        for end in range(max(breakpoints), -1, -1):
            near = any(0 <= b - end < CACHE_LOOKBACK_BLOCKS for b in breakpoints)
            if near and hashes[end] in self._seen:
                return end
        return None


def min_cacheable_tokens(model: str) -> int:
    """The shortest prefix the real API caches for this model (shorter ones are processed
    uncached, without an error)."""
    if any(name in model for name in ("opus-4-5", "opus-4-6", "haiku-4-5")):
        return 4096
    if "haiku" in model:
        return 2048
    return 1024


def total_input_tokens(body: dict[str, Any]) -> int:
    return max(1, tokens(sum(len(text) for text, _ in _segments(body))))


def usage_dict(input_tokens: int, creation: int, read: int, output: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": creation,
        "cache_read_input_tokens": read,
        "cache_creation": {"ephemeral_5m_input_tokens": creation, "ephemeral_1h_input_tokens": 0},
        "output_tokens": output,
        "service_tier": "standard",
    }


def _segments(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """The prompt as the cache sees it: tools, then system, then message blocks, in order."""
    items: list[tuple[Any, Any]] = [(t, t) for t in body.get("tools") or []]
    system = body.get("system")
    if isinstance(system, str):
        items.append(({"type": "text", "text": system}, None))
    elif isinstance(system, list):
        items += [(b, b) for b in system]
    for message in body["messages"]:
        items += [({"role": message["role"], **b}, b) for b in blocks_of(message)]
    return [
        (_strip_cache_control(item), bool(isinstance(src, dict) and src.get("cache_control"))) for item, src in items
    ]


def _strip_cache_control(block: Any) -> str:
    if isinstance(block, dict):
        block = {k: v for k, v in block.items() if k != "cache_control"}
    return dumps(block)


def _head_length(body: dict[str, Any]) -> int:
    """How many of the segments are tools and system (the rest are message blocks)."""
    system = body.get("system")
    count = 1 if isinstance(system, str) else len(system) if isinstance(system, list) else 0
    return len(body.get("tools") or []) + count


def _messages_key(body: dict[str, Any]) -> str:
    """What the message blocks' cache depends on besides their content (absent means auto)."""
    return dumps({"tool_choice": body.get("tool_choice") or {"type": "auto"}, "thinking": body.get("thinking")})


def _prefix_hashes(body: dict[str, Any], segments: list[tuple[str, bool]], head: int) -> list[str]:
    digest, out = hashlib.sha256(body["model"].encode()).hexdigest(), []
    for n, (text, _) in enumerate(segments):
        if n == head:
            digest = hashlib.sha256((digest + _messages_key(body)).encode()).hexdigest()
        digest = hashlib.sha256((digest + text).encode()).hexdigest()
        out.append(digest)
    return out


def _prefix_sizes(segments: list[tuple[str, bool]]) -> list[int]:
    sizes, total = [], 0
    for text, _ in segments:
        total += len(text)
        sizes.append(total)
    return sizes
