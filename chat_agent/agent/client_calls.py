"""Tools the client runs itself (an AG-UI frontend's `tools`): the model is offered them like
the server's own; a call to one waits here until the client sends its result, the wait
times out, or the turn is aborted.

One per turn, like the approval gate: the loop waits on it instead of the registry, the
conversation that owns the turn hands it the client's results. Abort is plain cancellation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chat_agent.agent.pending import Pending
from chat_agent.tooling import ToolResult

WAITING = "Waiting for the client"  # the progress status a call reports while the client runs it


@dataclass(slots=True)
class ClientCalls:
    schemas: list[dict[str, Any]] = field(default_factory=list)  # the tools as the model is offered them
    timeout: float = 600.0
    _waiting: Pending[ToolResult] = field(default_factory=Pending)

    def runs(self, tool_name: str) -> bool:
        return any(schema["name"] == tool_name for schema in self.schemas)

    async def wait(self, tool_id: str) -> ToolResult:
        """The client's result for this call; an error result once `timeout` seconds passed."""
        text = f"Not run: the client did not send this call's result within {self.timeout:g} seconds."
        return await self._waiting.wait(tool_id, self.timeout, ToolResult(content=text, output=text, is_error=True))

    def answer(self, tool_id: str, content: str, is_error: bool = False) -> bool:
        """Settles a waiting call; False when no call of this turn waits under that id."""
        return self._waiting.settle(tool_id, ToolResult(content=content, output=content, is_error=is_error))
