"""Tool approval (PROTOCOL 1.1): a call to a tool that needs the user's consent waits here
until the user answers, the wait times out, or the turn is aborted.

One gate per turn. The loop asks it before a call runs; the conversation that owns the
turn hands it the user's `approve` frames. Abort is plain cancellation of the waiting call,
like every other part of a turn: nothing here needs to know about it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chat_agent.agent.pending import Pending

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
    _waiting: Pending[Decision] = field(default_factory=Pending)

    def needs(self, tool_name: str) -> bool:
        return EVERY_TOOL in self.required or tool_name in self.required

    async def wait(self, tool_id: str) -> Decision:
        """The user's answer about this call; declined as timed out after `timeout` seconds."""
        return await self._waiting.wait(tool_id, self.timeout, Decision(False, timed_out=True))

    def answer(self, tool_id: str, approved: bool, message: str | None = None) -> bool:
        """Settles a waiting call; False when no call of this turn waits under that id (unknown,
        already answered, or timed out)."""
        return self._waiting.settle(tool_id, Decision(approved, message))
