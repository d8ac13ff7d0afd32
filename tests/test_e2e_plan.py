"""Plans (PROTOCOL 1.2): `update_plan` is offered by default, its steps stream as tool cards,
bad plans are refused to the model, and `session.plan` holds the latest steps of the running
or last reply, after a restart as before it. The demo model keeps a plan a newcomer sees."""

from __future__ import annotations

import signal

from chat_agent.model.demo import DemoModel
from chat_agent.model.types import ModelRequest
from tests.fakes.anthropic_fake import Reply, Text, ToolUse
from tests.support import connect, send, until


def steps(*pairs: tuple[str, str]) -> dict:
    return {"steps": [{"title": title, "status": status} for title, status in pairs]}


FIRST = steps(("Outline", "in_progress"), ("Draft", "pending"), ("Polish", "pending"))
SECOND = steps(("Outline", "done"), ("Draft", "done"), ("Polish", "in_progress"))


async def test_plan_cards_and_session_plan_after_restart(make_server, tmp_path, fake_anthropic):
    data = tmp_path / "data"
    server = make_server(data)
    ws, session = await connect(server)
    assert "plan" in session["features"] and session["plan"] is None
    cid = session["conversationId"]
    too_long = steps(*[(f"Step {n}", "pending") for n in range(21)])
    fake_anthropic.enqueue(Reply([Text("Planning."), ToolUse("update_plan", FIRST, id="toolu_p1")]),
                           Reply([ToolUse("update_plan", too_long, id="toolu_bad")]),
                           Reply([ToolUse("update_plan", SECOND, id="toolu_p2")]), Reply("All but polish done."))
    before = len(fake_anthropic.main_bodies)
    await send(ws, type="message", content="Write an essay in three steps")
    frames = await until(ws, "done", timeout=30)
    bodies = fake_anthropic.main_bodies[before:]
    offered = [t["name"] for t in bodies[0]["tools"]]
    assert "update_plan" in offered
    system = str(bodies[0]["system"])
    assert "three or more steps" in system and "update_plan" in system

    starts = [f for f in frames if f["type"] == "tool_start"]
    ends = {f["toolId"]: f for f in frames if f["type"] == "tool_end"}
    assert [s["toolId"] for s in starts] == ["toolu_p1", "toolu_bad", "toolu_p2"]
    assert starts[0]["name"] == "update_plan" and starts[0]["input"] == FIRST
    assert not ends["toolu_p1"]["isError"] and ends["toolu_p1"]["output"] == FIRST
    assert ends["toolu_bad"]["isError"]  # 21 steps: refused, the model is told why
    bad_result = [b for m in bodies[2]["messages"] if isinstance(m["content"], list)
                  for b in m["content"] if b.get("type") == "tool_result" and b["tool_use_id"] == "toolu_bad"][0]
    assert bad_result.get("is_error") and "20" in str(bad_result["content"])
    good_result = [b for m in bodies[1]["messages"] if isinstance(m["content"], list)
                   for b in m["content"] if b.get("type") == "tool_result" and b["tool_use_id"] == "toolu_p1"][0]
    assert "[>] Outline" in str(good_result["content"])

    ws2, again = await connect(server, cid)
    assert again["plan"] == SECOND["steps"]
    await ws.close()
    await ws2.close()

    # After a restart the plan is read back from the stored reply.
    assert server.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    server = make_server(data)
    ws, restarted = await connect(server, cid)
    assert restarted["plan"] == SECOND["steps"]
    # A later turn without a plan: the last turn's plan is none.
    fake_anthropic.enqueue(Reply("Just a quick answer."))
    await send(ws, type="message", content="thanks")
    await until(ws, "done", timeout=30)
    ws3, later = await connect(server, cid)
    assert later["plan"] is None
    await ws.close()
    await ws3.close()


async def test_the_demo_model_keeps_a_plan():
    model = DemoModel(pace=0)
    offered = [{"name": n} for n in ("generate_artifact", "web_search", "update_plan")]
    messages: list[dict] = [{"role": "user", "content": "Write a short guide to brewing tea"}]
    called: list[list[str]] = []
    for _ in range(5):
        reply = await model.call(ModelRequest(model="demo", max_tokens=100, messages=messages, tools=offered))
        messages.append({"role": "assistant", "content": reply.content})
        uses = [b for b in reply.content if b["type"] == "tool_use"]
        called.append([b["name"] for b in uses])
        if not uses:
            break
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b["id"],
             "content": "[1] Tea\nURL: https://tea.example\n" if b["name"] == "web_search" else "ok"} for b in uses]})
    assert called == [["update_plan", "web_search"], ["update_plan", "generate_artifact"], ["update_plan"], []]
    last_plan = [b for m in messages if m["role"] == "assistant" for b in m["content"]
                 if b["type"] == "tool_use" and b["name"] == "update_plan"][-1]["input"]["steps"]
    assert {s["status"] for s in last_plan} == {"done"}
    assert "canvas" in messages[-1]["content"][0]["text"]
