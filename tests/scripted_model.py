"""A scripted model for driving the ReAct loop in-process, and a checker of the history it
would be sent next.

Like mini-swe-agent's test model: no HTTP and no mocks, just a real `ModelClient` whose
replies were written in advance. Each step of the script is the list of items one call
streams: deltas, then a `ModelReply`; an exception instance is raised where it stands, and
`HANG` blocks the stream until it is cancelled (a reply the user stops mid-way).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from typing import Any, AsyncIterator, Iterable

from chat_agent.model import ModelReply, ModelRequest, TextDelta, ToolInputDelta
from chat_agent.protocol import Usage

HANG = object()
Step = list[Any]


class ScriptedModel:
    """A `ModelClient` replaying `script`, one step per call, recording every request."""

    configured = True

    def unavailable(self, model: str) -> str | None:
        return None

    def __init__(self, script: Iterable[Step]):
        self._script = iter(script)
        self.requests: list[ModelRequest] = []
        self.hanging = asyncio.Event()  # set once a stream blocks on HANG
        self.closed = False

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        # A copy, because the loop goes on appending to the lists it sent.
        self.requests.append(dataclasses.replace(request, messages=copy.deepcopy(request.messages)))
        step = next(self._script, None)
        if step is None:
            raise AssertionError(f"the model was called {len(self.requests)} times, more than scripted")
        for item in step:
            await asyncio.sleep(0)  # a real stream gives the loop a chance to be cancelled here
            if item is HANG:
                self.hanging.set()
                await asyncio.Event().wait()
            if isinstance(item, BaseException):
                raise item
            yield item

    async def call(self, request: ModelRequest) -> ModelReply:
        reply = None
        async for item in self.stream(request):
            if isinstance(item, ModelReply):
                reply = item
        assert reply is not None, "a scripted step ended without a ModelReply"
        return reply

    async def complete(self, request: ModelRequest) -> str:
        reply = await self.call(request)
        return "".join(b["text"] for b in reply.content if b["type"] == "text")

    async def close(self) -> None:
        self.closed = True


# ---- building steps ------------------------------------------------------------------------


def usage(input_tokens: int = 10, output_tokens: int = 5) -> Usage:
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens)


def text_reply(text: str, *, stop: str = "end_turn", tokens: Usage | None = None) -> Step:
    """Streams `text` in two pieces, as a real stream splits it, then finishes with it."""
    half = len(text) // 2
    deltas = [TextDelta(piece) for piece in (text[:half], text[half:]) if piece]
    return [*deltas, ModelReply([{"type": "text", "text": text}], stop, tokens or usage())]


def call(tool_id: str, name: str, **tool_input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}


def tool_reply(*calls: dict[str, Any], text: str | None = None, stop: str = "tool_use",
               tokens: Usage | None = None) -> Step:
    """Optional text, then the calls' inputs streamed as JSON, then the reply holding them."""
    head = [{"type": "text", "text": text}] if text else []
    deltas: list[Any] = [TextDelta(text)] if text else []
    deltas += [ToolInputDelta(c["id"], c["name"], json.dumps(c["input"])) for c in calls]
    return [*deltas, ModelReply([*head, *calls], stop, tokens or usage())]


# ---- what the API would accept ---------------------------------------------------------------


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _ids(message: dict[str, Any], kind: str, key: str) -> list[str]:
    return [b[key] for b in _blocks(message) if b.get("type") == kind]


def history_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Why this history could not be sent as it is: first is user, roles alternate, no empty
    text, and each tool_use is answered by a tool_result in the very next message (which
    answers nothing else)."""
    if not messages:
        return ["the history is empty"]
    problems = [] if messages[0]["role"] == "user" else [f"message 0 is {messages[0]['role']}, not user"]
    for i, message in enumerate(messages):
        if i and message["role"] == messages[i - 1]["role"]:
            problems.append(f"messages {i - 1} and {i} are both {message['role']}")
        for block in _blocks(message):
            if block.get("type") == "text" and not block.get("text", "").strip():
                problems.append(f"message {i} holds an empty text block")
        asked = _ids(messages[i - 1], "tool_use", "id") if i else []
        answered = _ids(message, "tool_result", "tool_use_id")
        if sorted(answered) != sorted(asked) and message["role"] == "user":
            problems.append(f"message {i} answers {answered}, but message {i - 1} asked {asked}")
    last_calls = _ids(messages[-1], "tool_use", "id")
    if last_calls and messages[-1]["role"] == "assistant":
        problems.append(f"the last message asks {last_calls}, never answered")
    return problems


def assert_valid(messages: list[dict[str, Any]]) -> None:
    problems = history_problems(messages)
    assert not problems, "invalid history:\n  " + "\n  ".join(problems) + f"\n{json.dumps(messages, indent=1)}"


def assert_requests_valid(model: ScriptedModel) -> None:
    for n, request in enumerate(model.requests):
        problems = history_problems(request.messages)
        assert not problems, f"request {n} was invalid:\n  " + "\n  ".join(problems)


def block_types(message: dict[str, Any]) -> list[str]:
    return [b["type"] for b in _blocks(message)]


def without_cache_marks(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A request's messages as the history holds them (the loop adds a cache breakpoint)."""
    return [{**m, "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in _blocks(m)]}
            for m in messages]
