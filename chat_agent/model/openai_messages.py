"""A ModelRequest (the Messages API's shapes) as Chat Completions parameters.

Pure translation, no SDK. What Chat Completions has no room for degrades to what it has:
cache breakpoints are dropped (OpenAI caches long prefixes by itself), thinking blocks stay
out (they are signed for Anthropic only), documents and search results become text, and
images travel as `image_url` parts; a tool result's images follow its `tool` message in a
user message, since a `tool` message carries text only.
"""

from __future__ import annotations

import json
from typing import Any

from chat_agent.model.citing import numbered, search_sources
from chat_agent.model.types import ModelRequest, encode_json, made_of, once

IMAGE_IN_RESULT = "[The image(s) this tool returned follow in the next message.]"
PDF_NOT_READ = "[A PDF document ({title}) is attached, but this model cannot read PDF files; ask for its text.]"
ERROR_PREFIX = "Error: "

Parts = list[dict[str, Any]]


def chat_params(request: ModelRequest, *, max_tokens_field: str = "max_tokens") -> dict[str, Any]:
    """Parameters for `chat.completions.create` (without `stream`)."""
    messages = _system(request.system) + [m for message in numbered(request.messages) for m in _message(message)]
    return {**_settings(request, max_tokens_field), "messages": messages}


def chat_body(request: ModelRequest, *, max_tokens_field: str = "max_tokens", **extra: Any) -> bytes:
    """`chat_params` (and `extra`) as the JSON of the request. A message the history keeps is
    translated and encoded once, on its first call: its form depends on nothing else, unless
    it holds search results (numbered over the whole request), which are translated anew."""
    sources = made_of(request.messages, "sources", _sources)
    numbers = {source: n for n, source in enumerate(dict.fromkeys(s for found in sources for s in found), 1)}
    parts = [encode_json(message) for message in _system(request.system)]
    if numbers:
        parts += [_encoded(numbered([message], numbers)[0]) if found else once(message, "chat", _encoded)
                  for message, found in zip(request.messages, sources)]
    else:
        parts += made_of(request.messages, "chat", _encoded)
    head = encode_json({**_settings(request, max_tokens_field), **extra})
    return b"".join((head[:-1], b',"messages":[', b",".join(part for part in parts if part), b"]}"))


def max_tokens(request: ModelRequest) -> int:
    """The output limit asked for: without the thinking budget, which this API has no room for."""
    return max(1, request.max_tokens - (request.thinking_budget or 0))


def _settings(request: ModelRequest, max_tokens_field: str) -> dict[str, Any]:
    params: dict[str, Any] = {"model": request.model, max_tokens_field: max_tokens(request)}
    tools = [_tool(t) for t in request.tools if "input_schema" in t]
    if tools:
        params["tools"] = tools
        choice = _tool_choice(request.tool_choice)
        if choice is not None:
            params["tool_choice"] = choice
    return params


def _sources(message: dict[str, Any]) -> list[str]:
    return search_sources([message])


def _encoded(message: dict[str, Any]) -> bytes:
    """The chat messages a message becomes, as JSON joined by commas (empty for none)."""
    return b",".join(encode_json(m) for m in _message(message))


def _system(system: str | list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    if not system:
        return []
    text = system if isinstance(system, str) else "\n\n".join(b["text"] for b in system if b.get("type") == "text")
    return [{"role": "system", "content": text}]


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = {"name": tool["name"], "parameters": tool["input_schema"]}
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tool_choice(choice: dict[str, Any] | None) -> Any:
    kind = (choice or {}).get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": choice["name"]}}  # type: ignore[index]
    return {"any": "required", "auto": "auto", "none": "none"}.get(kind or "")


def _message(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    if message["role"] == "assistant":
        return [_assistant(content)]
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    # The API puts tool results first in a user message: they answer the assistant's calls
    # and so become `tool` messages right after it; the rest is the user's own message.
    messages: list[dict[str, Any]] = []
    images: Parts = []
    for block in content:
        if block.get("type") == "tool_result":
            text, shown = _tool_result(block)
            messages.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": text})
            images += shown
    parts = images + [p for b in content if b.get("type") != "tool_result" for p in _user_parts(b)]
    if parts:
        messages.append({"role": "user", "content": _compact(parts)})
    return messages


def _assistant(content: str | list[dict[str, Any]]) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts = [b["text"] for b in content if b.get("type") == "text" and b.get("text")]
    calls = [{"id": b["id"], "type": "function",
              "function": {"name": b["name"], "arguments": json.dumps(b.get("input") or {}, ensure_ascii=False)}}
             for b in content if b.get("type") == "tool_use"]
    message: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_result(block: dict[str, Any]) -> tuple[str, Parts]:
    """The text of a `tool` message, and the images to show after it."""
    content = block.get("content")
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else \
        [p for b in content or [] for p in _user_parts(b)]
    images = [p for p in parts if p["type"] == "image_url"]
    texts = [p["text"] for p in parts if p["type"] == "text"] + ([IMAGE_IN_RESULT] if images else [])
    text = "\n\n".join(texts) or "(no output)"
    if block.get("is_error") and not text.startswith(ERROR_PREFIX):
        text = ERROR_PREFIX + text  # Chat Completions has no is_error: the model reads it
    return text, images


def _user_parts(block: dict[str, Any]) -> Parts:
    kind = block.get("type")
    if kind == "text":
        return [{"type": "text", "text": block["text"]}] if block.get("text") else []
    if kind == "image":
        url = _image_url(block.get("source") or {})
        return [{"type": "image_url", "image_url": {"url": url}}] if url else []
    if kind == "document":
        return [{"type": "text", "text": _document_text(block)}]
    if kind == "search_result":
        body = "\n".join(b.get("text", "") for b in block.get("content") or [] if isinstance(b, dict))
        return [{"type": "text", "text": f"<search_result source={json.dumps(block.get('source', ''))} "
                                         f"title={json.dumps(block.get('title', ''))}>\n{body}\n</search_result>"}]
    return []  # thinking and the like: the Messages API's own, nothing for this model


def _image_url(source: dict[str, Any]) -> str | None:
    if source.get("type") == "base64":
        return f"data:{source['media_type']};base64,{source['data']}"
    if source.get("type") == "url":
        return source.get("url")
    return None


def _document_text(block: dict[str, Any]) -> str:
    source = block.get("source") or {}
    title = block.get("title") or "untitled"
    if source.get("type") == "text":
        body = source.get("data", "")
    elif source.get("type") == "content":
        body = "\n\n".join(b.get("text", "") for b in source.get("content") or [] if isinstance(b, dict))
    else:
        return PDF_NOT_READ.format(title=title)
    return f"<document title={json.dumps(title, ensure_ascii=False)}>\n{body}\n</document>"


def _compact(parts: Parts) -> str | Parts:
    """Text alone as a plain string: every compatible server takes that, not all take parts."""
    if all(p["type"] == "text" for p in parts):
        return "\n\n".join(p["text"] for p in parts)
    return parts
