"""Tool approval (PROTOCOL 1.1): a call to a tool that needs the user's consent waits here
until the user answers, the wait times out, or the turn is aborted.

One gate per turn. The loop asks it before a call runs; the conversation that owns the
turn hands it the user's `approve` frames. Abort is plain cancellation of the waiting call,
like every other part of a turn: nothing here needs to know about it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

EVERY_TOOL = "*"


@dataclass(frozen=True, slots=True)
class Decision:
    approved: bool
    message: str | None = None
    timed_out: bool = False

    def refusal(self, timeout: float) -> str:
        """What the model and the tool card are told about a call that did not run."""
        if self.timed_out:
            return f"Not run: the user did not approve this call within {timeout:g} seconds."
        if self.message:
            return f"Not run: the user declined this call, saying: {self.message}"
        return "Not run: the user declined this call."


@dataclass(slots=True)
class ApprovalGate:
    required: frozenset[str] = frozenset()  # tool names, or "*" for every tool
    timeout: float = 600.0
    _waiting: dict[str, asyncio.Future[Decision]] = field(default_factory=dict)

    def needs(self, tool_name: str) -> bool:
        return EVERY_TOOL in self.required or tool_name in self.required

    async def wait(self, tool_id: str) -> Decision:
        """The user's answer about this call; declined as timed out after `timeout` seconds."""
        future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        self._waiting[tool_id] = future
        try:
            return await asyncio.wait_for(future, self.timeout)
        except TimeoutError:
            return Decision(False, timed_out=True)
        finally:
            self._waiting.pop(tool_id, None)

    def answer(self, tool_id: str, approved: bool, message: str | None = None) -> bool:
        """Settles a waiting call; False when no call of this turn waits under that id (unknown,
        already answered, or timed out)."""
        future = self._waiting.pop(tool_id, None)
        if future is None or future.done():
            return False
        future.set_result(Decision(approved, message))
        return True
