"""Aborting a running task in a test: an abort must end the work at once, not when it is done."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests import pace


async def cancel_within(task: asyncio.Task[Any], seconds: float) -> None:
    """Cancels `task`, which must then end cancelled, and within `seconds` (scaled by the load)."""
    began = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    took, bound = time.monotonic() - began, pace.scaled(seconds)
    assert took < bound, f"the task took {took:.3f} s to end after cancel() (at most {bound:.2f} s)"
