"""`reflect`: the model records durable style rules and facts about the user.

What it saves joins the user's memories (`chat_agent.memory`), which go into the system
prompt of every later conversation; so the description insists on durable things only.
"""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.tools import BaseTool, InjectedToolArg, tool
from pydantic import Field

from chat_agent.tooling import MEMORY_ITEM_CHARS as MAX_CHARS
from chat_agent.tooling import MemoriesRecord, Settings, ToolContext, clean_item, item_key

NAME = "reflect"
MAX_PER_CALL = 10  # per list: more at once is not reflection but a dump
Item = Annotated[str, Field(max_length=MAX_CHARS)]

DESCRIPTION = """Remember something about the user for all future conversations.

Call it when the user reveals something durable: a style rule (how they want things written or coded in general: tone, length, format, language, conventions) or a fact about them (who they are, what they work on, their goals and audience). The user's corrections of your writing are good evidence of style.

Do not record one-off requests about the current piece ("make this shorter"), the topic of a single task, guesses, or anything already in your memories. One short, self-contained sentence per item: a style rule as an instruction ("Use British spelling."), a fact as a statement about the user ("Teaches chemistry to 15-year-olds.")."""


def build(settings: Settings) -> BaseTool:
    # Nothing to configure: the memories live in the store every server has.

    @tool(NAME, description=DESCRIPTION, response_format="content_and_artifact")
    async def reflect(
        ctx: Annotated[ToolContext, InjectedToolArg],
        styleRules: Annotated[  # noqa: N803 - the schema's names are camelCase
            list[Item], Field(max_length=MAX_PER_CALL, description="New style rules, each an instruction.")
        ] = [],  # noqa: B006 - pydantic copies defaults; the model sees `default: []`
        facts: Annotated[
            list[Item], Field(max_length=MAX_PER_CALL, description="New facts about the user, each a statement.")
        ] = [],  # noqa: B006
    ) -> tuple[str, dict[str, Any]]:
        if not any(item.strip() for item in [*styleRules, *facts]):
            raise ValueError("Nothing to remember: give at least one non-empty item in styleRules or facts.")
        memory = ctx.memory
        before = memory.current()
        after = await memory.add(styleRules, facts)
        return _report(before, after, styleRules, facts), _artifact(after)

    return reflect


def _report(before: MemoriesRecord, after: MemoriesRecord, rules: list[str], facts: list[str]) -> str:
    """Tells the model what is new, what it already knew, and where the memories stand now."""
    known = {item_key(item) for item in [*before.style_rules, *before.content]}
    given = {item_key(item): clean_item(item) for item in [*rules, *facts] if item.strip()}
    fresh = [item for key, item in given.items() if key not in known]
    lines = [f"Saved: {'; '.join(fresh)}." if fresh else "Nothing new was saved."]
    if repeated := len(given) - len(fresh):
        lines.append(f"{_count(repeated, 'item')} {'was' if repeated == 1 else 'were'} already remembered.")
    total_before = len(before.style_rules) + len(before.content)
    if (dropped := total_before + len(fresh) - len(after.style_rules) - len(after.content)) > 0:
        lines.append(f"The oldest {_count(dropped, 'item')} {'was' if dropped == 1 else 'were'} forgotten "
                     "to stay within the limit.")
    lines.append(f"The user's memories now hold {_count(len(after.style_rules), 'style rule')} "
                 f"and {_count(len(after.content), 'fact')}.")
    return " ".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _artifact(record: MemoriesRecord) -> dict[str, Any]:
    return {"styleRules": list(record.style_rules), "content": list(record.content)}
