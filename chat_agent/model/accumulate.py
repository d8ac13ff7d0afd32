"""A streamed Messages API reply, event by event, into deltas and one `ModelReply`.

The SDK's own accumulator builds the message; we only step in where it gives up. Its
`accumulate_event` raises ValueError on a tool call whose JSON the model wrote broken,
which would end the whole stream: that one block's JSON is then kept here instead, and the
reply reports the call as invalid so the loop can tell the model rather than fail the turn.

Events come as the API's JSON (the SDK's stream with `object` as its type: no model built
per event), and what the stream tells as it goes (deltas, tool calls, citations) is read
from it. The message is built once the stream has ended, when it is first read: the other
events go to `accumulate_event` then, in their order, each block's text and thinking added
in one piece before the next of them, and each tool call's input parsed once from its whole
JSON, in the SDK's partial mode (a call cut off by the output limit keeps what was written).
Building one model object per delta, and growing the text one delta at a time, cost more
CPU than all the rest of a relayed frame's way (issue 23's profile: a fifth of the
server's); a typed event and a parse of the JSON so far per piece of a tool call's input
(~20 µs each) made a 100 KB artifact cost 0.3 s of the event loop; and the typed
`message_start` (~0.1 ms) came between every turn's request and its first text.
"""

from __future__ import annotations

import json
from typing import Any

from anthropic.lib.streaming._messages import accumulate_event  # the SDK's accumulator (SDK >= 2.0)
from jiter import from_json  # the SDK's own JSON parser, in its partial mode

from chat_agent.model.citing import MarkerScanner
from chat_agent.model.types import ModelReply, StreamItem, TextDelta, ThinkingDelta, ToolInputDelta
from chat_agent.protocol import Usage
from chat_agent.text import scrub, scrub_json


def usage_of(usage: Any) -> Usage:
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_read_tokens=getattr(usage, "cache_read_input_tokens", None) or 0,
        cache_write_tokens=getattr(usage, "cache_creation_input_tokens", None) or 0,
    )


def block_json(block: Any) -> dict[str, Any] | None:
    """The history form of a response block, or None for one the API would refuse back:
    empty text, and thinking without a signature (cut off by the output limit)."""
    kind = block.type
    if kind == "text":
        return {"type": "text", "text": block.text} if block.text else None
    if kind == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input or {}}
    if kind == "thinking":
        if not block.signature:
            return None
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.data}
    return block.model_dump(mode="json", exclude_none=True)


def refusal_detail(message: Any) -> str | None:
    """The API's explanation of a refusal (`stop_details.explanation`), when it gives one."""
    details = getattr(message, "stop_details", None)
    explanation = getattr(details, "explanation", None)
    return explanation if isinstance(explanation, str) and explanation.strip() else None


def reply_of(message: Any, invalid: dict[str, str] | None = None) -> ModelReply:
    """A finished Message as a ModelReply; `invalid` maps tool_use ids to the broken JSON."""
    invalid = invalid or {}
    content = []
    for block in message.content:
        data = block_json(block)
        if data is not None and data["type"] == "tool_use" and data["id"] in invalid:
            data["input"] = {}  # what the model wrote cannot be sent back; the result says so
        if data is not None:
            # A lone surrogate can be neither stored nor sent back: repaired (U+FFFD) the
            # way the streamed deltas were.
            content.append(scrub_json(data))
    return ModelReply(content, message.stop_reason or "end_turn", usage_of(message.usage),
                      invalid_calls={k: scrub(v) for k, v in invalid.items()},
                      stop_detail=refusal_detail(message))


_NONE: dict[int, list[str]] = {}  # no text before an event (shared, never written to)


class ReplyAccumulator:
    """Feed it the stream's events (the API's JSON) in order; it returns the deltas to yield
    for each. `reply` builds the message."""

    def __init__(self, request_messages: list[dict[str, Any]] | None = None) -> None:
        self.message: Any = None  # the SDK's snapshot of the message, built by `reply`
        self._started = False  # message_start came
        # Numbers the search results the request holds, for the citations of them.
        self._cited = MarkerScanner(request_messages or [])
        # A cited block's citations come before its text: told once the block is written, so
        # that they belong to the text streamed so far, as a client shows them.
        self._citing: dict[int, list[StreamItem]] = {}
        self._tools: dict[int, tuple[str, str]] = {}  # block index -> (id, name) of each tool_use
        self._raw: dict[int, list[str]] = {}  # block index -> the JSON pieces as written
        self._broken: set[int] = set()  # blocks whose JSON the SDK could not parse (or was not whole)
        # Text and thinking streamed since the last other event: block index -> pieces.
        self._pending: dict[int, list[str]] = {}
        # For `accumulate_event` at the end: each other event, after the text streamed before it.
        self._events: list[tuple[dict[int, list[str]], dict[str, Any]]] = []

    def feed(self, event: dict[str, Any]) -> list[StreamItem]:
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event["delta"]
            if delta["type"] == "text_delta":
                return self._streamed(event["index"], delta["text"], TextDelta)
            if delta["type"] == "thinking_delta":
                return self._streamed(event["index"], delta["thinking"], ThinkingDelta)
            if delta["type"] == "input_json_delta":
                return self._tool_input(event)
        if not self._started and kind != "message_start":
            return []  # pings and the like before the message starts, as the SDK skips them
        self._started = True
        self._keep(event)
        if kind == "content_block_start" and event["content_block"]["type"] == "tool_use":
            block = event["content_block"]
            self._tools[event["index"]] = (block["id"], block["name"])
            self._raw[event["index"]] = []
        elif kind == "content_block_stop" and event["index"] in self._tools:
            self._check_complete(event["index"])
        elif kind == "content_block_stop":
            return self._citing.pop(event["index"], [])
        elif kind == "content_block_delta" and event["delta"]["type"] == "citations_delta":
            citation = event["delta"]["citation"]
            if citation.get("type") == "search_result_location":
                found = self._cited.citation(str(citation.get("source")), scrub(citation.get("cited_text") or ""))
                if found is not None:
                    self._citing.setdefault(event["index"], []).append(found)
        return []

    def _streamed(self, index: int, piece: str, item: type[TextDelta] | type[ThinkingDelta]) -> list[StreamItem]:
        if not self._started:
            return []
        self._pending.setdefault(index, []).append(piece)
        return [item(scrub(piece))]

    def _keep(self, event: dict[str, Any]) -> None:
        pending = self._pending
        if pending:
            self._pending = {}
        self._events.append((pending or _NONE, event))

    def _tool_input(self, event: dict[str, Any]) -> list[StreamItem]:
        index, piece = event["index"], event["delta"]["partial_json"]
        if index in self._raw:
            self._raw[index].append(piece)  # a tool_use's input: parsed once, by `_build`
        elif self._started:
            self._keep(event)  # another kind of block's (a server tool's): the SDK's to read
        if not piece or index not in self._tools:
            return []
        tool_id, name = self._tools[index]
        return [ToolInputDelta(tool_id, name, scrub(piece))]

    def _check_complete(self, index: int) -> None:
        # The SDK parses in partial mode, so JSON that simply stops short passes it; a block
        # that is closed must hold one whole JSON value.
        raw = "".join(self._raw[index])
        if not raw:
            return  # a call without arguments streams no JSON; its input is {}
        try:
            json.loads(raw)
        except ValueError:
            self._broken.add(index)

    def _build(self) -> None:
        """The SDK's snapshot, from the events kept: text and thinking added in one piece
        before each other event, as `accumulate_event` would have, one delta at a time."""
        bufs: dict[int, bytes] = {}  # the SDK's own partial-JSON buffers
        unparsable: set[int] = set()
        message = None
        for pending, event in [*self._events, (self._pending, None)]:
            for index, pieces in pending.items():
                block = message.content[index]
                if block.type == "text":
                    block.text += "".join(pieces)
                elif block.type == "thinking":
                    block.thinking += "".join(pieces)
            if event is None:
                break
            if event["type"] == "content_block_delta" and event["delta"]["type"] == "input_json_delta":
                if event["index"] in unparsable:
                    continue
                try:
                    message = accumulate_event(event=event, current_snapshot=message,  # type: ignore[arg-type]
                                               json_bufs=bufs)
                except ValueError:
                    # Later pieces must not reach the SDK either: appended to its buffer without
                    # the rejected piece, they could parse into an input the model never wrote.
                    unparsable.add(event["index"])
                continue
            message = accumulate_event(event=event, current_snapshot=message,  # type: ignore[arg-type]
                                       json_bufs=bufs)
        for index, pieces in self._raw.items():
            # Parsed as the SDK parses each piece's prefix (partial JSON: a call cut off by
            # the output limit has the input written so far), once: the SDK's typed event
            # and parse per piece cost ~20 µs each, 0.3 s of the event loop for a 100 KB
            # artifact.
            raw = "".join(pieces)
            # A call without arguments may stream no JSON or only empty pieces: its input
            # stays the {} of its content_block_start.
            if raw and index not in self._broken:
                try:
                    message.content[index].input = from_json(raw.encode(), partial_mode=True)
                except ValueError:
                    self._broken.add(index)
        self.message = message
        self._broken |= unparsable

    def reply(self) -> ModelReply:
        if not self._started:
            raise ValueError("the stream ended before message_start")
        if self.message is None:
            self._build()
        invalid = {self._tools[i][0]: "".join(self._raw[i]) for i in self._broken if i in self._tools}
        return reply_of(self.message, invalid)
