"""`update_plan` (PROTOCOL 1.2 "Plans"): the model keeps a visible checklist for multi-step work.

The tool changes nothing but the reply: its card is the plan. Each call sends the whole
list again, so the latest card of a reply is the plan as it stands (clients draw it from
there, `session.plan` is read from there), and a restart loses nothing that was shown.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from langchain_core.tools import BaseTool, tool
from pydantic import BaseModel, Field, StringConstraints

from chat_agent.tooling import Settings

NAME = "update_plan"
MAX_STEPS = 20  # PROTOCOL.md: a plan of at most 20 steps
TITLE_CHARS = 200

StepStatus = Literal["pending", "in_progress", "done", "skipped"]
_MARKS = {"pending": "[ ]", "in_progress": "[>]", "done": "[x]", "skipped": "[-]"}

DESCRIPTION = f"""Show the user a checklist of your plan for work of three or more steps, and keep it current.

Call it before you start such work, with every step `pending` except the first, `in_progress`; call it again each time a step is finished (`done`), dropped (`skipped`) or the plan changes, always with the whole list. Keep one step `in_progress` at a time. Titles are short imperative phrases ("Search recent sources", "Draft the introduction"). At most {MAX_STEPS} steps. Skip it for simple requests: a plan of one or two steps is noise."""


class PlanStep(BaseModel):
    title: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=TITLE_CHARS)] = Field(
        description="What the step does, as a short imperative phrase.")
    status: StepStatus = Field(description="pending, in_progress, done or skipped.")


class PlanInput(BaseModel):
    steps: list[PlanStep] = Field(min_length=1, max_length=MAX_STEPS,
                                  description=f"The whole plan, in order (1 to {MAX_STEPS} steps).")


def build(settings: Settings) -> BaseTool:
    # Nothing to configure: a plan lives in the reply itself, so the tool is always offered.

    @tool(NAME, description=DESCRIPTION, args_schema=PlanInput, response_format="content_and_artifact")
    async def update_plan(steps: list[PlanStep]) -> tuple[str, dict[str, Any]]:
        checked = [PlanStep.model_validate(step) for step in steps]
        active = [step for step in checked if step.status == "in_progress"]
        if len(active) > 1:
            raise ValueError("More than one step is in_progress: keep one step in progress at a time.")
        return _report(checked), {"steps": [step.model_dump() for step in checked]}

    return update_plan


def _report(steps: list[PlanStep]) -> str:
    """The plan read back to the model, so later steps see where it stands."""
    left = sum(step.status in ("pending", "in_progress") for step in steps)
    lines = [f"{_MARKS[step.status]} {step.title}" for step in steps]
    return f"Plan updated ({left} of {len(steps)} steps left):\n" + "\n".join(lines)
