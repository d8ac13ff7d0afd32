"""A LangChain tool's call schema as an Anthropic `tools` entry."""

from __future__ import annotations

import inspect
from typing import Any

from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_function

# Keys whose value maps names to schemas: the names there are data, not keywords,
# so a property called "title" survives the clean-up.
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions"})
# Keys whose value is data (a default, an example), copied as is.
_VALUES = frozenset({"default", "enum", "const", "examples"})


def anthropic_schema(tool: BaseTool) -> dict[str, Any]:
    """`{name, description, input_schema}` for the Messages API.

    LangChain's OpenAI conversion already reads the call schema without injected
    arguments (pydantic v1/v2 or a JSON-schema dict) and inlines `$ref`s; what it
    leaves is pydantic's `title` noise below the top level and an undedented
    docstring, which cost tokens on every model call.
    """
    function = convert_to_openai_function(tool)
    params = _strip_titles(function.get("parameters") or {})
    params.pop("description", None)  # duplicates the tool description
    params["type"] = "object"
    params.setdefault("properties", {})
    if not params.get("required"):
        params.pop("required", None)
    schema: dict[str, Any] = {"name": tool.name}
    description = inspect.cleandoc(tool.description or "")
    if description:
        schema["description"] = description
    schema["input_schema"] = params
    return schema


def _strip_titles(node: Any, *, names: bool = False) -> Any:
    if isinstance(node, list):
        return [_strip_titles(item) for item in node]
    if not isinstance(node, dict):
        return node
    if names:  # {property name: schema}
        return {key: _strip_titles(value) for key, value in node.items()}
    return {
        key: value if key in _VALUES else _strip_titles(value, names=key in _SCHEMA_MAPS)
        for key, value in node.items()
        if key != "title"
    }
