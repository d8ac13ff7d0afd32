"""Request validation with the real Messages API's rules and (as near as known) its wording.

Every check raises `ApiError`; the first failure wins, like the real API.
"""

from __future__ import annotations

import base64
import functools
import io
import json

import re
from typing import Any

from jsonschema import Draft202012Validator
from PIL import Image
from jsonschema.exceptions import SchemaError

from tests.fakes.anthropic_script import Signer, invalid
from tests.fakes.anthropic_turns import (
    blocks_of,
    check_loop_starts_with_thinking,
    check_thinking_blocks,
    check_tool_pairing,
    merge_turns,
)

TOP_LEVEL_KEYS = {
    "model", "messages", "max_tokens", "system", "tools", "tool_choice", "thinking", "stream",
    "stop_sequences", "metadata", "temperature", "top_p", "top_k", "service_tier", "container",
    "cache_control", "diagnostics", "inference_geo", "output_config", "speed", "mcp_servers",
    "context_management", "user_profile_id", "workspace_id",
}  # fmt: skip
CUSTOM_TOOL_KEYS = {
    "type", "name", "description", "input_schema", "cache_control", "strict", "defer_loading",
    "allowed_callers", "input_examples", "eager_input_streaming",
}  # fmt: skip
BLOCK_TYPES = {
    "text", "image", "document", "search_result", "tool_use", "tool_result", "thinking",
    "redacted_thinking", "server_tool_use", "web_search_tool_result", "web_fetch_tool_result",
    "code_execution_tool_result", "container_upload", "mcp_tool_use", "mcp_tool_result",
}  # fmt: skip
THINKING_TYPES = ("adaptive", "disabled", "enabled", "between_tools")
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
MAX_CACHE_BREAKPOINTS = 4


def validate_request(body: Any, signer: Signer, *, count_tokens: bool = False) -> None:
    if not isinstance(body, dict):
        raise invalid("Input should be a valid dictionary")
    _check_top_level(body, count_tokens)
    _check_system(body.get("system"))
    tool_names = _check_tools(body.get("tools"))
    _check_tool_choice(body.get("tool_choice"), tool_names)
    thinking_on = _check_thinking(body)
    messages = body["messages"]
    for i, message in enumerate(messages):
        _check_message(i, message, is_last=i == len(messages) - 1)
    turns = merge_turns(messages)
    check_tool_pairing(turns)
    check_thinking_blocks(messages, signer)
    if thinking_on:
        check_loop_starts_with_thinking(turns)
    _check_cache_breakpoints(body)


def thinking_enabled(body: dict[str, Any]) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled")


# -- top level ---------------------------------------------------------------------------


def _check_top_level(body: dict[str, Any], count_tokens: bool) -> None:
    required = ("model", "messages") if count_tokens else ("model", "max_tokens", "messages")
    for key in required:
        if key not in body:
            raise invalid(f"{key}: Field required")
    for key in body:
        if key not in TOP_LEVEL_KEYS:
            raise invalid(f"{key}: Extra inputs are not permitted")
    if not isinstance(body["model"], str) or not body["model"]:
        raise invalid("model: Input should be a valid string")
    if not count_tokens:
        _check_max_tokens(body["max_tokens"])
    if not isinstance(body["messages"], list):
        raise invalid("messages: Input should be a valid list")
    if not body["messages"]:
        raise invalid("messages: at least one message is required")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise invalid("stream: Input should be a valid boolean")
    stops = body.get("stop_sequences")
    if stops is not None and not (isinstance(stops, list) and all(isinstance(s, str) for s in stops)):
        raise invalid("stop_sequences: Input should be a valid list of strings")


def _check_max_tokens(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid("max_tokens: Input should be a valid integer")
    if value < 1:
        raise invalid("max_tokens: Input should be greater than or equal to 1")


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list):
        raise invalid("system: Input should be a valid string or a list of text blocks")
    for j, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise invalid(f"system.{j}.type: Input should be 'text'")
        _check_text_block(block, "system")


def _check_text_block(block: dict[str, Any], where: str) -> None:
    text = block.get("text")
    if not isinstance(text, str):
        raise invalid(f"{where}: text content blocks must have a `text` string")
    if not text:
        raise invalid(f"{where}: text content blocks must be non-empty")
    if not text.strip():
        raise invalid(f"{where}: text content blocks must contain non-whitespace text")


# -- tools -------------------------------------------------------------------------------


def _check_tools(tools: Any) -> list[str]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise invalid("tools: Input should be a valid list")
    names = [_check_tool(i, tool) for i, tool in enumerate(tools)]
    if len(set(names)) != len(names):
        raise invalid("tools: Tool names must be unique.")
    return names


def _check_tool(i: int, tool: Any) -> str:
    if not isinstance(tool, dict):
        raise invalid(f"tools.{i}: Input should be a valid dictionary")
    if tool.get("type", "custom") != "custom":
        return str(tool.get("name", tool["type"]))  # server tools: schema is the API's own
    where = f"tools.{i}.custom"
    for key in tool:
        if key not in CUSTOM_TOOL_KEYS:
            raise invalid(f"{where}.{key}: Extra inputs are not permitted")
    name = tool.get("name")
    if not isinstance(name, str):
        raise invalid(f"{where}.name: Field required")
    if not TOOL_NAME.match(name):
        raise invalid(f"{where}.name: String should match pattern '{TOOL_NAME.pattern}'")
    _check_input_schema(where, tool.get("input_schema"))
    return name


@functools.lru_cache(maxsize=1024)
def _schema_is_valid(schema_json: str) -> bool:
    """Meta-schema validation costs milliseconds per tool; clients send the same tools on
    every call, so each distinct schema is checked once."""
    try:
        Draft202012Validator.check_schema(json.loads(schema_json))
    except SchemaError:
        return False
    return True


def _check_input_schema(where: str, schema: Any) -> None:
    if schema is None:
        raise invalid(f"{where}.input_schema: Field required")
    if not isinstance(schema, dict):
        raise invalid(f"{where}.input_schema: Input should be a valid dictionary")
    if schema.get("type") != "object":
        raise invalid(f"{where}.input_schema.type: Input should be 'object'")
    if not _schema_is_valid(json.dumps(schema, sort_keys=True)):
        raise invalid(
            f"{where}.input_schema: JSON schema is invalid. It must match JSON Schema draft 2020-12 "
            "(https://json-schema.org/draft/2020-12). Learn more about tool use at "
            "https://docs.claude.com/en/docs/tool-use."
        ) from None


def _check_tool_choice(choice: Any, tool_names: list[str]) -> None:
    if choice is None:
        return
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind not in ("auto", "any", "tool", "none"):
        raise invalid(
            f"tool_choice: Input tag '{kind}' found using 'type' does not match any of the "
            "expected tags: 'auto', 'any', 'tool', 'none'"
        )
    if kind in ("any", "tool") and not tool_names:
        raise invalid("tool_choice may only be specified while providing tools.")
    if kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str):
            raise invalid("tool_choice.tool.name: Field required")
        if name not in tool_names:
            raise invalid(f"tool_choice.tool.name: Tool '{name}' not found in provided tools")


# -- thinking config -----------------------------------------------------------------------


def _check_thinking(body: dict[str, Any]) -> bool:
    thinking = body.get("thinking")
    if thinking is None:
        return False
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind not in THINKING_TYPES:
        expected = ", ".join(f"'{t}'" for t in THINKING_TYPES)
        raise invalid(
            f"thinking: Input tag '{kind}' found using 'type' does not match any of the expected tags: {expected}"
        )
    if kind == "enabled":
        _check_budget(thinking.get("budget_tokens"), body.get("max_tokens"))
    on = kind != "disabled"
    choice = body.get("tool_choice")
    if on and isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        raise invalid("Thinking may not be enabled when tool_choice forces tool use.")
    return on


def _check_budget(budget: Any, max_tokens: Any) -> None:
    if budget is None:
        raise invalid("thinking.enabled.budget_tokens: Field required")
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise invalid("thinking.enabled.budget_tokens: Input should be a valid integer")
    if budget < 1024:
        raise invalid("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
    if isinstance(max_tokens, int) and budget >= max_tokens:
        raise invalid(
            "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at "
            "https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"
        )


# -- messages ------------------------------------------------------------------------------


def _check_message(i: int, message: Any, *, is_last: bool) -> None:
    where = f"messages.{i}"
    if not isinstance(message, dict):
        raise invalid(f"{where}: Input should be a valid dictionary")
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise invalid(f"{where}.role: Input should be 'user' or 'assistant'")
    if i == 0 and role != "user":
        raise invalid('messages: first message must use the "user" role')
    content = message.get("content")
    if not isinstance(content, str | list):
        raise invalid(f"{where}.content: Field required")
    prefill = is_last and role == "assistant"
    if not content and not prefill:
        raise invalid(
            f"{where}: all messages must have non-empty content except for the optional final assistant message"
        )
    if isinstance(content, list):
        for j, block in enumerate(content):
            _check_block(f"{where}.content.{j}", role, block)
    if prefill:
        _check_prefill(content)


def _check_block(where: str, role: str, block: Any) -> None:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind not in BLOCK_TYPES:
        raise invalid(f"{where}.type: Input tag '{kind}' found using 'type' does not match any of the expected tags")
    if kind == "text":
        _check_text_block(block, "messages")
    elif kind in ("tool_use", "thinking", "redacted_thinking") and role != "assistant":
        raise invalid(f"{where}: `{kind}` blocks can only be in `assistant` messages")
    elif kind == "tool_result" and role != "user":
        raise invalid(f"{where}: `tool_result` blocks can only be in `user` messages")
    if kind == "tool_use":
        _check_tool_use(where, block)
    elif kind == "tool_result":
        _check_tool_result(where, block)
    elif kind == "image":
        _check_image(where, block)


IMAGE_TYPES = {"image/jpeg": "JPEG", "image/png": "PNG", "image/gif": "GIF", "image/webp": "WEBP"}
MAX_IMAGE_BYTES = 5 * 1024 * 1024
MAX_IMAGE_EDGE = 8000


def _check_image(where: str, block: dict[str, Any]) -> None:
    """The API decodes every base64 image: wrong type, bad data, too big are 400s."""
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") not in ("base64", "url", "file"):
        raise invalid(f"{where}.image.source: Field required")
    if source["type"] != "base64":
        return
    media_type = source.get("media_type")
    if media_type not in IMAGE_TYPES:
        raise invalid(f"{where}.image.source.base64.media_type: Input should be 'image/jpeg', 'image/png', "
                      "'image/gif' or 'image/webp'")
    data = source.get("data")
    if not isinstance(data, str) or not data:
        raise invalid(f"{where}.image.source.base64.data: Field required")
    if len(data) > MAX_IMAGE_BYTES:
        raise invalid(f"{where}.image.source.base64: image exceeds 5 MB maximum: {len(data)} bytes > "
                      f"{MAX_IMAGE_BYTES} bytes")
    try:
        raw = base64.b64decode(data, validate=True)
        with Image.open(io.BytesIO(raw)) as image:
            actual, size = image.format, image.size
            image.load()
    except Exception:  # noqa: BLE001 - whatever Pillow says, the API says the same thing
        raise invalid(f"{where}.image.source.base64.data: Could not process image") from None
    if actual != IMAGE_TYPES[media_type]:
        kinds = {v: k for k, v in IMAGE_TYPES.items()}
        raise invalid(f"{where}.image.source.base64.data: The image was specified using the {media_type} media "
                      f"type, but the image appears to be a {kinds.get(actual or '', 'unknown')} image")
    if max(size) > MAX_IMAGE_EDGE:
        raise invalid(f"{where}.image.source.base64.data: At least one of the image dimensions exceed max "
                      f"allowed size: {MAX_IMAGE_EDGE} pixels")


def _check_tool_use(where: str, block: dict[str, Any]) -> None:
    block_id = block.get("id")
    if not isinstance(block_id, str) or not TOOL_USE_ID.match(block_id):
        raise invalid(f"{where}.tool_use.id: String should match pattern '{TOOL_USE_ID.pattern}'")
    if not isinstance(block.get("name"), str):
        raise invalid(f"{where}.tool_use.name: Field required")
    if not isinstance(block.get("input"), dict):
        raise invalid(f"{where}.tool_use.input: Input should be a valid dictionary")


def _check_tool_result(where: str, block: dict[str, Any]) -> None:
    if not isinstance(block.get("tool_use_id"), str):
        raise invalid(f"{where}.tool_result.tool_use_id: Field required")
    content = block.get("content", "")
    if isinstance(content, list):
        for j, inner in enumerate(content):
            if isinstance(inner, dict) and inner.get("type") == "text":
                _check_text_block(inner, "messages")
            elif isinstance(inner, dict) and inner.get("type") == "image":
                _check_image(f"{where}.content.{j}", inner)
            elif isinstance(inner, dict) and inner.get("type") == "search_result":
                _check_search_result(f"{where}.content.{j}", inner)
    elif not isinstance(content, str):
        raise invalid(f"{where}.tool_result.content: Input should be a valid string or list")


def _check_search_result(where: str, block: dict[str, Any]) -> None:
    """As the API checks one: a source and a title, and text blocks for content."""
    for key in ("source", "title"):
        if not isinstance(block.get(key), str):
            raise invalid(f"{where}.search_result.{key}: Field required")
    content = block.get("content")
    if not isinstance(content, list) or not content or any(
            not isinstance(b, dict) or b.get("type") != "text" or not isinstance(b.get("text"), str) for b in content):
        raise invalid(f"{where}.search_result.content: Input should be a list of text blocks")
    citations = block.get("citations")
    if citations is not None and not (isinstance(citations, dict) and isinstance(citations.get("enabled"), bool)):
        raise invalid(f"{where}.search_result.citations: Input should be an object with `enabled`")


def _check_prefill(content: str | list[Any]) -> None:
    last = blocks_of({"content": content})[-1:] if content else []
    if last and last[0].get("type") == "text" and last[0].get("text", "") != last[0].get("text", "").rstrip():
        raise invalid("messages: final assistant content cannot end with trailing whitespace")


# -- cache_control ---------------------------------------------------------------------------


def _check_cache_breakpoints(body: dict[str, Any]) -> None:
    found = count_cache_breakpoints(body)
    if found > MAX_CACHE_BREAKPOINTS:
        raise invalid(f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found {found}.")


def count_cache_breakpoints(body: dict[str, Any]) -> int:
    blocks: list[Any] = list(body.get("tools") or [])
    if isinstance(body.get("system"), list):
        blocks += body["system"]
    for message in body["messages"]:
        for block in blocks_of(message):
            blocks.append(block)
            if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                blocks += block["content"]
    marked = sum(1 for b in blocks if isinstance(b, dict) and b.get("cache_control"))
    return marked + (1 if body.get("cache_control") else 0)
