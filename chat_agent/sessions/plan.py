"""`session.plan` (PROTOCOL 1.2 "Plans"), read from the reply's own `update_plan` cards.

The plan is not stored apart: every call of the tool carries the whole list and its card
is stored with the reply, so the latest successful card of the running or last reply is
the plan, after a restart as before it.
"""

from __future__ import annotations

from typing import Sequence

from pydantic import ValidationError

from chat_agent.protocol import PlanStep, ToolPart, VisibleMessage

TOOL = "update_plan"  # PROTOCOL.md's fixed name


def latest_plan(messages: Sequence[VisibleMessage]) -> list[PlanStep] | None:
    """The steps of the last `update_plan` call that worked in the newest assistant message
    (the running reply when there is one), or None when that reply kept no plan."""
    reply = next((m for m in reversed(messages) if m.role == "assistant"), None)
    if reply is None:
        return None
    for part in reversed(reply.parts):
        if isinstance(part, ToolPart) and part.name == TOOL and part.duration is not None and not part.is_error:
            try:
                return [PlanStep.model_validate(step) for step in part.input.get("steps") or []]
            except ValidationError:  # a card stored by another version of the tool: no plan is better than a wrong one
                return None
    return None
