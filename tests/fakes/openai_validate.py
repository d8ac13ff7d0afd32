"""What the real Chat Completions API refuses, refused the same way (status, error body,
wording close to the real one): a request our translation gets wrong fails here as it
would against OpenAI, instead of passing a lenient fake."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass
class OpenAIError(Exception):
    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


TOP_LEVEL = {"model", "messages", "max_tokens", "max_completion_tokens", "stream", "stream_options", "tools",
             "tool_choice", "parallel_tool_calls", "temperature", "top_p", "stop", "n", "seed", "response_format",
             "user", "metadata", "store", "reasoning_effort", "logprobs", "top_logprobs", "presence_penalty",
             "frequency_penalty", "logit_bias", "modalities", "prediction", "service_tier", "prompt_cache_key"}
MESSAGE_KEYS = {"system": {"role", "content", "name"}, "developer": {"role", "content", "name"},
                "user": {"role", "content", "name"}, "assistant": {"role", "content", "name", "tool_calls", "refusal"},
                "tool": {"role", "content", "tool_call_id"}}
USER_PARTS = {"text": {"type", "text"}, "image_url": {"type", "image_url"}, "input_audio": {"type", "input_audio"},
              "file": {"type", "file"}}
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def invalid(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param=param, code=code)


def _extra(keys: set[str], allowed: set[str], where: str) -> None:
    unexpected = sorted(keys - allowed)
    if unexpected:
        raise invalid(f"Additional properties are not allowed ('{unexpected[0]}' was unexpected) - '{where}'",
                      param=where, code="additional_properties")


def validate(body: Any) -> None:
    if not isinstance(body, dict):
        raise invalid("We could not parse the JSON body of your request.")
    for key in body:
        if key not in TOP_LEVEL:
            raise invalid(f"Unrecognized request argument supplied: {key}")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise invalid("you must provide a model parameter")
    if "stream_options" in body and not body.get("stream"):
        raise invalid("The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("Invalid 'messages': empty array. Expected an array with minimum length 1.", "messages")
    names = _tools(body)
    _tool_choice(body, names)
    _sequence(messages)


def _tools(body: dict[str, Any]) -> set[str]:
    if "tools" not in body:
        return set()
    tools = body["tools"]
    if not isinstance(tools, list) or not tools:
        raise invalid("Invalid 'tools': empty array. Expected an array with minimum length 1, but got an empty "
                      "array instead.", "tools", "empty_array")
    names = set()
    for i, tool in enumerate(tools):
        _extra(set(tool), {"type", "function"}, f"tools[{i}]")
        function = tool.get("function") or {}
        _extra(set(function), {"name", "description", "parameters", "strict"}, f"tools[{i}].function")
        name = function.get("name")
        if tool.get("type") != "function" or not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise invalid(f"Invalid 'tools[{i}].function.name': string does not match pattern. Expected a string "
                          "that matches the pattern '^[a-zA-Z0-9_-]+$'.", f"tools[{i}].function.name",
                          "invalid_value")
        schema = function.get("parameters", {"type": "object", "properties": {}})
        kind = schema.get("type") if isinstance(schema, dict) else None
        if kind != "object":
            raise invalid(f"Invalid schema for function '{name}': schema must be a JSON Schema of 'type: \"object\"', "
                          f"got 'type: \"{kind}\"'.", f"tools[{i}].function.parameters", "invalid_function_parameters")
        names.add(name)
    return names


def _tool_choice(body: dict[str, Any], names: set[str]) -> None:
    if "tool_choice" not in body:
        return
    choice = body["tool_choice"]
    if not names:
        raise invalid("Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
                      "tool_choice")
    if choice in ("none", "auto", "required"):
        return
    name = ((choice or {}).get("function") or {}).get("name") if isinstance(choice, dict) else None
    if not isinstance(choice, dict) or choice.get("type") != "function" or name not in names:
        raise invalid(f"Invalid value for 'tool_choice': {choice!r} is not 'none', 'auto', 'required' or a function "
                      "among the tools.", "tool_choice")


def _sequence(messages: list[Any]) -> None:
    """Every call an assistant message makes is answered by `tool` messages right after it,
    and a `tool` message answers a call that was made."""
    pending: list[str] = []
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in MESSAGE_KEYS:
            raise invalid(f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', 'tool', "
                          "'function', and 'developer'.", f"messages[{i}].role")
        _extra(set(message), MESSAGE_KEYS[role], f"messages[{i}]")
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                raise invalid("Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                              "message with 'tool_calls'.", f"messages.[{i}].role")
            pending.remove(message["tool_call_id"])
            _text_content(message.get("content"), f"messages[{i}].content")
            continue
        if pending:
            raise _unanswered(pending)
        if role == "assistant":
            pending = _assistant(message, i)
        elif role == "user":
            _user_content(message.get("content"), i)
        else:
            _text_content(message.get("content"), f"messages[{i}].content")
    if pending:
        raise _unanswered(pending)


def _unanswered(pending: list[str]) -> OpenAIError:
    return invalid("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                   f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}",
                   "messages")


def _assistant(message: dict[str, Any], i: int) -> list[str]:
    calls = message.get("tool_calls") or []
    content = message.get("content")
    if content is None and not calls:
        raise invalid("Invalid value for 'content': expected a string, got null.", f"messages.[{i}].content")
    if content is not None:
        _text_content(content, f"messages[{i}].content")
    ids = []
    for j, call in enumerate(calls):
        _extra(set(call), {"id", "type", "function"}, f"messages[{i}].tool_calls[{j}]")
        function = call.get("function") or {}
        if call.get("type") != "function" or not isinstance(function.get("arguments"), str) or not call.get("id"):
            raise invalid(f"Invalid 'messages[{i}].tool_calls[{j}]': expected an id, type 'function' and "
                          "string arguments.", f"messages[{i}].tool_calls[{j}]")
        ids.append(call["id"])
    return ids


def _text_content(content: Any, where: str) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list) or not content:
        raise invalid(f"Invalid type for '{where}': expected one of a string or array of objects.", where)
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise invalid(f"Invalid value: '{part.get('type') if isinstance(part, dict) else part}'. Supported "
                          "values are: 'text'.", f"{where}[{j}].type")
        _extra(set(part), {"type", "text"}, f"{where}[{j}]")


def _user_content(content: Any, i: int) -> None:
    where = f"messages[{i}].content"
    if isinstance(content, str):
        return
    if not isinstance(content, list) or not content:
        raise invalid(f"Invalid type for '{where}': expected one of a string or array of objects.", where)
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in USER_PARTS:
            raise invalid(f"Invalid value: '{kind}'. Supported values are: 'text', 'image_url', 'input_audio', "
                          "'refusal', 'audio', and 'file'.", f"{where}[{j}].type", "invalid_value")
        _extra(set(part), USER_PARTS[kind], f"{where}[{j}]")
        if kind == "image_url":
            url = (part.get("image_url") or {}).get("url", "")
            if not re.match(r"(https?://|data:image/(png|jpeg|gif|webp);base64,)", url):
                raise invalid("Invalid 'image_url'. Expected a base64-encoded data URL with an image MIME type or "
                              "a URL.", f"{where}[{j}].image_url.url", "invalid_image_url")
