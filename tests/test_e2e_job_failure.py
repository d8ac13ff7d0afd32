"""A background job the model API does not answer: the real server says so in one line, at
WARNING, as a turn's error says it; its log holds no traceback of our own code."""

from __future__ import annotations

import asyncio
import json

from tests.conftest import SMALL_MODEL
from tests.fakes.anthropic_fake import Fault
from tests.support import connect, send, until


def _title_call(body: dict) -> bool:
    return body.get("model") == SMALL_MODEL and "set_title" in json.dumps(body)


async def test_a_title_the_model_api_refuses_is_a_warning_not_a_traceback(make_server, fake_anthropic):
    server = make_server(CHAT_AGENT_LLM_MAX_RETRIES="0")
    fake_anthropic.enqueue(Fault.status(529), when=_title_call)
    ws, _ = await connect(server)
    try:
        await send(ws, type="message", content="where do owls sleep?")
        frames = await until(ws, "done")
        assert frames[-1]["stopReason"] == "end_turn"  # the turn itself is not touched
    finally:
        await ws.close()

    def failed() -> list[str]:
        return [line for line in server.log_path.read_text(errors="replace").splitlines()
                if "background job" in line and ":title" in line]

    async with asyncio.timeout(30):
        while not failed():
            await asyncio.sleep(0.1)
    [line] = failed()
    assert " WARNING " in line and "overloaded" in line, line
    assert "Traceback" not in server.log_path.read_text(errors="replace")
