"""A fake OpenAI-compatible Chat Completions API: a real HTTP server on loopback speaking the
real wire format.

    with FakeOpenAI() as fake:       # fake.base_url ends in /v1, as OPENAI_BASE_URL does
        fake.enqueue(Reply("Hello", calls=[Call("web_search", {"query": "x"})]))

Streams SSE as the API does (`data: {chunk}` lines, `data: [DONE]`): a first chunk with the
role, text and tool-call pieces (a call's first piece has its index, id, type and name,
the rest pieces of its arguments), a chunk with `finish_reason`, and with
`stream_options.include_usage` a last chunk without choices holding `usage` (with
`prompt_tokens_details.cached_tokens`: a prefix of at least 1024 tokens seen before is
cached, in 128-token steps, as OpenAI does). Refuses what the API refuses
(`openai_validate`), 401 without the key; faults are scripted (`Fault`). Nothing queued: it
answers from the last user message (`[[tool NAME {json}]]` directives call tools).
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakes.anthropic_default import parse_directives
from tests.fakes.embeddings import embed
from tests.fakes.loopback import LoopbackServer
from tests.fakes.openai_validate import OpenAIError, validate

When = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class Call:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw: str | None = None  # streamed as written instead of `arguments` (broken JSON, say)


@dataclass(frozen=True)
class Reply:
    text: str = ""
    calls: tuple[Call, ...] | list[Call] = ()
    finish_reason: str | None = None  # None: tool_calls with calls, else stop
    reasoning: str = ""  # streamed as `reasoning_content` first, as vLLM does for reasoning models
    refusal: str | None = None
    chunk_size: int = 8  # characters per content / arguments piece
    delay: float = 0.0  # seconds between chunks
    hang_after: int | None = None  # chunks sent before it stops sending and waits for the client to leave
    usage: dict[str, int] | None = None  # overrides the computed counts


@dataclass(frozen=True)
class Fault:
    status: int = 500
    retry_after: float | None = None
    after_chunks: int | None = None  # None: an HTTP error; else a 200 stream cut after that many chunks
    error_event: bool = False  # the cut is a `data: {"error": ...}` chunk rather than a dropped connection


class Dropped(ConnectionResetError):
    """Raised in a response being streamed: uvicorn then cuts the connection mid-body."""


def _not_dropped(record: logging.LogRecord) -> bool:
    return not (record.exc_info and isinstance(record.exc_info[1], Dropped))


logging.getLogger("uvicorn.error").addFilter(_not_dropped)  # a scripted fault, not a failure of the fake

ERRORS = {
    429: ("Rate limit reached for requests. Please try again in 1s.", "requests", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request. Sorry about that!", "server_error", None),
    503: ("The engine is currently overloaded, please try again later.", "server_error", None),
}


class FakeOpenAI(LoopbackServer):
    name = "OpenAI"
    api_key = "sk-test-openai-0123456789"

    def __init__(self, *, keep_log: bool = True) -> None:
        """`keep_log=False`: `requests` and `embedding_requests` stay empty (a fake in a
        process of its own, as FakeAnthropic's `keep_log`)."""
        super().__init__()
        self.keep_log = keep_log
        self._lock = threading.Lock()
        self._queue: list[tuple[Reply | Fault, When | None]] = []
        self.requests: list[dict[str, Any]] = []
        self.embedding_requests: list[dict[str, Any]] = []
        self.finished = 0  # streams sent to their end
        self.left = 0  # streams the client closed before their end
        self._prefixes: list[str] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def enqueue(self, *items: Reply | Fault, when: When | None = None) -> None:
        with self._lock:
            self._queue += [(item, when) for item in items]

    def verdicts(self, *items: Reply | Fault) -> None:
        """Queue the reviewer's answers (`verdict(...)`), used by reviewer calls only, in
        order; with none queued a review passes."""
        self.enqueue(*items, when=is_review)

    def drop_queue(self) -> None:
        with self._lock:
            self._queue.clear()

    @property
    def pending(self) -> int:
        return len(self._queue)

    def routes(self) -> list[Route]:
        return [Route("/v1/chat/completions", self._completions, methods=["POST"]),
                Route("/v1/embeddings", self._embeddings, methods=["POST"])]

    async def _embeddings(self, request: Request) -> Response:
        """`/v1/embeddings` as OpenAI answers it, with the fake model's vectors (fakes/embeddings.py)."""
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            return _error(OpenAIError(401, "Incorrect API key provided.", code="invalid_api_key"))
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _error(OpenAIError(400, "We could not parse the JSON body of your request."))
        texts = body.get("input") if isinstance(body, dict) else None
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(body.get("model"), str) or not isinstance(texts, list) or not texts \
                or not all(isinstance(t, str) and t for t in texts) or len(texts) > 2048:
            return _error(OpenAIError(400, "'input' must be a non-empty string or a list of at most 2048 of them, "
                                           "and 'model' a string."))
        if self.keep_log:
            self.embedding_requests.append(body)
        data = [{"object": "embedding", "index": i, "embedding": embed(t)} for i, t in enumerate(texts)]
        tokens = sum(len(t.split()) for t in texts)
        return JSONResponse({"object": "list", "data": data, "model": body["model"],
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    def _take(self, body: dict[str, Any]) -> Reply | Fault:
        with self._lock:
            for n, (item, when) in enumerate(self._queue):
                if when is None or when(body):
                    del self._queue[n]
                    return item
        return default_reply(body)

    async def _completions(self, request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            return _error(OpenAIError(401, "Incorrect API key provided. You can find your API key at "
                                           "https://platform.openai.com/account/api-keys.", code="invalid_api_key"))
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _error(OpenAIError(400, "We could not parse the JSON body of your request."))
        if self.keep_log:
            self.requests.append(body)
        try:
            validate(body)
        except OpenAIError as exc:
            return _error(exc)
        item = self._take(body)
        if isinstance(item, Fault) and item.after_chunks is None:
            message, kind, code = ERRORS.get(item.status, ("Something went wrong.", "server_error", None))
            headers = {"retry-after": str(item.retry_after)} if item.retry_after is not None else {}
            return _error(OpenAIError(item.status, message, kind, code=code), headers)
        reply = item if isinstance(item, Reply) else Reply("partial answer " * 20, chunk_size=4)
        usage = self._usage(body, reply)
        if not body.get("stream"):
            return JSONResponse(_completion(body, reply, usage))
        chunks = _chunks(body, reply, usage)
        return StreamingResponse(self._sse(chunks, reply, item if isinstance(item, Fault) else None),
                                 media_type="text/event-stream")

    async def _sse(self, chunks: list[dict[str, Any]], reply: Reply, fault: Fault | None) -> AsyncIterator[bytes]:
        done = False
        try:
            for n, chunk in enumerate(chunks):
                if fault is not None and n == fault.after_chunks:
                    if fault.error_event:
                        yield _data({"error": {"message": "The server had an error while processing your request.",
                                               "type": "server_error", "param": None, "code": None}})
                        done = True
                        return
                    raise Dropped("the fake drops the connection")
                if reply.hang_after is not None and n == reply.hang_after:
                    await self._wait(600)
                    return
                yield _data(chunk)
                if reply.delay:
                    await self._wait(reply.delay)
            yield b"data: [DONE]\n\n"
            done = True
        finally:
            with self._lock:
                if done:
                    self.finished += 1
                else:
                    self.left += 1

    def _usage(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        prefix = json.dumps([body.get("tools"), body["messages"]], sort_keys=True)
        prompt = len(prefix) // 4
        with self._lock:
            shared = max((_common(prefix, seen) for seen in self._prefixes), default=0) // 4
            self._prefixes.append(prefix)
        cached = shared // 128 * 128 if shared >= 1024 else 0
        completion = (len(reply.text) + sum(len(json.dumps(c.arguments)) for c in reply.calls)) // 4 + 1
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, **(reply.usage or {})}
        cached = min(usage.pop("cached_tokens", cached), usage["prompt_tokens"])
        return {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"],
                "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}}


def _common(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _error(exc: OpenAIError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


def _data(chunk: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(chunk)}\n\n".encode()


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def _finish(reply: Reply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.calls else "stop")


def _arguments(call: Call) -> str:
    return call.raw if call.raw is not None else json.dumps(call.arguments)


def _chunks(body: dict[str, Any], reply: Reply, usage: dict[str, Any]) -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-" + secrets.token_hex(12), "object": "chat.completion.chunk", "created": int(time.time()),
            "model": body["model"], "system_fingerprint": "fp_fake"}
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        made = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        return {**made, "usage": None} if include_usage else made

    deltas = [{"role": "assistant", "content": "", "refusal": None}]
    deltas += [{"reasoning_content": p} for p in _pieces(reply.reasoning, reply.chunk_size)]
    deltas += [{"content": p} for p in _pieces(reply.text, reply.chunk_size)]
    if reply.refusal:
        deltas += [{"refusal": p} for p in _pieces(reply.refusal, reply.chunk_size)]
    for index, call in enumerate(reply.calls):
        deltas.append({"tool_calls": [{"index": index, "id": "call_" + secrets.token_hex(12), "type": "function",
                                       "function": {"name": call.name, "arguments": ""}}]})
        deltas += [{"tool_calls": [{"index": index, "function": {"arguments": p}}]}
                   for p in _pieces(_arguments(call), reply.chunk_size)]
    chunks = [chunk(d) for d in deltas] + [chunk({}, _finish(reply))]
    if include_usage:
        chunks.append({**base, "choices": [], "usage": usage})
    return chunks


def _completion(body: dict[str, Any], reply: Reply, usage: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": reply.refusal}
    if reply.calls:
        message["tool_calls"] = [{"id": "call_" + secrets.token_hex(12), "type": "function",
                                  "function": {"name": c.name, "arguments": _arguments(c)}} for c in reply.calls]
    return {"id": "chatcmpl-" + secrets.token_hex(12), "object": "chat.completion", "created": int(time.time()),
            "model": body["model"], "system_fingerprint": "fp_fake", "usage": usage,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": _finish(reply)}]}


# ---- the answer when nothing is queued ---------------------------------------------------------


REVIEW_TOOL = "submit_review"  # the tool the server forces on its reviewer calls


def is_review(body: dict[str, Any]) -> bool:
    choice = body.get("tool_choice")
    return isinstance(choice, dict) and (choice.get("function") or {}).get("name") == REVIEW_TOOL


def verdict(passed: bool, score: float, feedback: str = "", suggestions: tuple[str, ...] | list[str] = ()) -> Reply:
    """The reviewer's answer: its forced tool call with this verdict."""
    text = feedback or ("Meets the request." if passed else "Misses what was asked.")
    return Reply(calls=[Call(REVIEW_TOOL, {"passed": passed, "score": score, "feedback": text,
                                           "suggestions": list(suggestions)})])


def default_reply(body: dict[str, Any]) -> Reply:
    if is_review(body):  # a reviewer with nothing scripted passes the result
        return verdict(True, 0.9)
    messages = body["messages"]
    system = " ".join(m["content"] for m in messages if m["role"] == "system" and isinstance(m["content"], str))
    if "summar" in system.lower() and not body.get("tools"):
        return Reply("Summary: the conversation so far, in brief.")
    if messages[-1]["role"] == "tool":
        results = [m["content"] for m in messages if m["role"] == "tool"]
        return Reply("Done: " + str(results[-1])[:200])
    last = next(m for m in reversed(messages) if m["role"] == "user")
    content = last["content"]
    text = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
    offered = {t["function"]["name"]: t["function"] for t in body.get("tools") or []}
    calls = [Call(name, args) for name, args in parse_directives(text).tools if name in offered]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        name = choice["function"]["name"]
        calls = [c for c in calls if c.name == name][:1] or [Call(name, _example(offered[name]))]
        return Reply(calls=calls)
    return Reply("Calling tools." if calls else "Echo: " + text, calls=calls)


def _example(function: dict[str, Any]) -> dict[str, Any]:
    schema = function.get("parameters") or {}
    props = schema.get("properties") or {}
    return {name: f"fake {name}" if (props.get(name) or {}).get("type", "string") == "string" else 1
            for name in schema.get("required") or []}



def main() -> None:
    """`python -m tests.fakes.openai_fake`: prints its base URL, serves until killed."""
    with FakeOpenAI(keep_log=False) as fake:
        print(fake.base_url, flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
