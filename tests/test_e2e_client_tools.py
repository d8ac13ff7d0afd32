"""The client's own tools over the WebSocket (ours; what AG-UI's `tools` are): offered with
`settings.clientTools`, a call waits for `tool_result` from any socket, the model reads it;
a wrong answer is the sender's `not_found`, bad declarations are `invalid_frame`; `context`
reaches the system prompt."""

from __future__ import annotations

from tests.fakes.anthropic_fake import Reply, ToolUse
from tests.support import connect, recv, send, until

CHART = {"name": "show_chart", "description": "Shows a tide chart",
         "parameters": {"type": "object", "properties": {"station": {"type": "string"}}}}


async def test_a_client_tool_waits_for_tool_result(server, fake_anthropic):
    ws, session = await connect(server)
    fake_anthropic.enqueue(Reply([ToolUse("show_chart", {"station": "Brest"})]), Reply("Charted."))
    await send(ws, type="message", content="Chart Brest", settings={
        "clientTools": [CHART], "context": [{"description": "Screen", "value": "the harbour map"}]})
    frames = await until(ws, "tool_progress", timeout=20)
    start, waiting = [f for f in frames if f["type"] == "tool_start"][-1], frames[-1]
    assert start["name"] == "show_chart" and start["input"] == {"station": "Brest"}
    assert waiting["toolId"] == start["toolId"] and waiting["status"] == "Waiting for the client"
    sent = fake_anthropic.last_main.body
    assert any(t["name"] == "show_chart" for t in sent["tools"]) and "the harbour map" in str(sent["system"])

    ws2, _ = await connect(server, session["conversationId"])  # any socket may answer
    await send(ws2, type="tool_result", toolId="toolu_nobody", content="?")
    wrong = await recv(ws2)
    assert wrong["type"] == "error" and wrong["code"] == "not_found" and "seq" not in wrong
    await send(ws2, type="tool_result", toolId=start["toolId"], content="Chart of Brest shown")
    frames = await until(ws, "done", timeout=20)
    end = [f for f in frames if f["type"] == "tool_end"][0]
    assert end["output"] == "Chart of Brest shown" and end["isError"] is False
    assert frames[-1]["stopReason"] == "end_turn"
    results = [b for m in fake_anthropic.last_main.body["messages"] if isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "tool_result"]
    assert (results[-1]["tool_use_id"], results[-1]["content"]) == (start["toolId"], "Chart of Brest shown")

    # Declarations the server cannot offer: a server tool's name, a name given twice, a bad name.
    for tools in ([{**CHART, "name": "web_search"}], [CHART, CHART], [{**CHART, "name": "no spaces"}]):
        await send(ws, type="message", content="again", settings={"clientTools": tools})
        refused = await until(ws, "error")
        assert refused[-1]["code"] == "invalid_frame", refused
    for sock in (ws, ws2):
        await sock.close()
