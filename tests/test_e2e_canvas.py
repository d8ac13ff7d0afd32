"""The canvas from a real client: artifacts and their versions, highlight edits, quick actions,
memories, titles, caching and export, and all of it surviving a restart."""

from __future__ import annotations

import asyncio
import time
import io
import json
import signal
import urllib.request

import docx
import pytest

from chat_agent import edits
from tests.conftest import SMALL_MODEL
from tests.fakes.anthropic_fake import Reply, Text, ToolUse
from tests.support import ServerProcess, connect, recv, send, until

POEM = "# Spring\n\nThe **first** buds open.\n\n- rain\n- sun\n\nAnd the *birds* return to the old oak.\n"


def request_json(server: ServerProcess, method: str, path: str, body: object | None = None) -> tuple[int, object]:
    return server.request(method, path, body=body)


def edited(frames: list[dict], base: str, index: int) -> str:
    """The content of the one `artifact_edit` among `frames` (version `index`, made from the
    version before it), with its changes applied to `base`, that version's content."""
    [edit] = [f for f in frames if f["type"] in ("artifact", "artifact_edit")]
    assert edit["type"] == "artifact_edit" and (edit["baseIndex"], edit["index"]) == (index - 1, index), edit
    return edits.apply(base, [(c["start"], c["end"], c["text"]) for c in edit["changes"]])


def main_text(body: dict) -> str:
    return json.dumps(body["messages"][-1], ensure_ascii=False)


async def turn(ws, fake, *replies, **message) -> list[dict]:
    fake.enqueue(*replies)
    await send(ws, type="message", **message)
    return await until(ws, "done")


async def test_canvas_session(make_server, fake_anthropic, tmp_path):
    data = tmp_path / "data"
    server = make_server(data)
    ws, session = await connect(server)
    conversation_id = session["conversationId"]
    assert session["artifact"] is None

    # generate: the text streams as artifact_chunk before the call completes, then `artifact`
    fake_anthropic.enqueue(Reply([ToolUse("set_title", {"title": "Spring Poem Drafting"})]),
                           when=lambda body: body.get("model") == SMALL_MODEL and "set_title" in json.dumps(body))
    frames = await turn(ws, fake_anthropic, Reply([Text("Drafting."), ToolUse(
        "generate_artifact", {"title": "Spring", "type": "text", "content": POEM})], chunk_size=9, delay=0.06),
        Reply("Here is your poem."), content="write a spring poem")
    kinds = [f["type"] for f in frames]
    chunks = [f for f in frames if f["type"] == "artifact_chunk"]
    assert "".join(c["content"] for c in chunks) == POEM and len(chunks) > 3
    assert kinds.index("artifact_chunk") < kinds.index("tool_start") < kinds.index("artifact") < kinds.index("tool_end")
    artifact = next(f for f in frames if f["type"] == "artifact")["artifact"]
    assert artifact["currentIndex"] == 1 and artifact["versionCount"] == 1
    assert artifact["current"] == {"index": 1, "type": "text", "title": "Spring", "language": None, "content": POEM}
    title = await recv(ws, skip=())
    assert title["type"] == "title" and title["title"] == "Spring Poem Drafting"

    # rewrite: a full new version; the model was not re-sent the artifact it had just written.
    # Clients get it as an edit (PROTOCOL 1.1): it changes five characters of the poem.
    v2 = POEM.replace("old oak", "old oak tree")
    frames = await turn(ws, fake_anthropic, Reply([ToolUse("rewrite_artifact", {"content": v2})]), Reply("Rewritten."),
                        content="make the oak a tree")
    assert "<artifact " not in main_text(fake_anthropic.main_bodies[-2])
    assert edited(frames, POEM, 2) == v2

    # highlight: update_artifact is forced, the model sees a window, the span is replaced exactly
    start = v2.index("first")
    end = start + len("first")
    frames = await turn(ws, fake_anthropic, Reply([ToolUse("update_artifact", {"replacement": "earliest"})]),
                        Reply("Changed."), content="a stronger word",
                        canvas={"highlight": {"start": start, "end": end, "selectedText": "first"}})
    sent = fake_anthropic.main_bodies[-2]
    assert sent["tool_choice"] == {"type": "tool", "name": "update_artifact"}
    assert "<highlight>first</highlight>" in main_text(sent)
    v3 = v2[:start] + "earliest" + v2[end:]
    assert edited(frames, v2, 3) == v3

    # quick action: rewrite_artifact is forced with our instructions; a code action is refused
    await send(ws, type="message", content="", canvas={"quickAction": {"name": "fix_bugs"}})
    assert (await recv(ws))["code"] == "no_artifact"
    v4 = v3.replace("buds", "buds 🌱")
    frames = await turn(ws, fake_anthropic, Reply([ToolUse("rewrite_artifact", {"content": v4})]), Reply("Emojis."),
                        content="", canvas={"quickAction": {"name": "emojis"}})
    assert edited(frames, v3, 4) == v4
    sent = fake_anthropic.main_bodies[-2]
    assert sent["tool_choice"] == {"type": "tool", "name": "rewrite_artifact"} and "emojis" in main_text(sent)
    # the model knows the result of its own span edit of a version it had seen: not re-sent
    assert "<artifact" not in main_text(sent)

    # select an old version, then the user edits it: a new last version
    await send(ws, type="select_artifact_version", index=1)
    selected = await recv(ws)
    assert selected["type"] == "artifact" and selected["artifact"]["currentIndex"] == 1
    assert selected["artifact"]["versionCount"] == 4 and selected["artifact"]["current"]["content"] == POEM
    await send(ws, type="edit_artifact", content=POEM + "\nA line of my own.\n", title="Spring, edited")
    edit = await recv(ws)  # an edit of version 1, the selected one
    assert edit["type"] == "artifact_edit" and (edit["baseIndex"], edit["index"]) == (1, 5)
    assert edit["changes"] == [{"start": len(POEM), "end": len(POEM), "text": "\nA line of my own.\n"}]
    assert edit["title"] == "Spring, edited" and "language" not in edit
    await send(ws, type="select_artifact_version", index=9)
    assert (await recv(ws))["code"] == "not_found"

    # custom quick action: each include flag changes what the model is sent
    status, action = request_json(server, "POST", "/api/quick-actions", {
        "title": "Haiku", "prompt": "Turn the artifact into a haiku.", "includeReflections": False,
        "includePrefix": False, "includeRecentHistory": False})
    assert status == 201 and action["includePrefix"] is False
    request_json(server, "PUT", "/api/memories", {"styleRules": ["Use British spelling"], "content": ["Likes oaks"]})
    await turn(ws, fake_anthropic, Reply([ToolUse("rewrite_artifact", {"content": "Buds open\nrain and sun\nold oak"})]),
               Reply("Haiku."), content="", canvas={"quickAction": {"name": "custom", "id": action["id"]}})
    bare = fake_anthropic.main_bodies[-2]
    assert bare["tool_choice"]["name"] == "rewrite_artifact" and "Turn the artifact into a haiku." in main_text(bare)
    assert len(bare["messages"]) == 1  # no recent history
    # the standing canvas instructions (they name the tools) and the memories are left out
    assert "British" not in json.dumps(bare["system"]) and "generate_artifact" not in json.dumps(bare["system"])
    request_json(server, "PUT", f"/api/quick-actions/{action['id']}",
                 {"includeReflections": True, "includePrefix": True, "includeRecentHistory": True})
    await turn(ws, fake_anthropic, Reply([ToolUse("rewrite_artifact", {"content": "Haiku two"})]), Reply("Again."),
               content="", canvas={"quickAction": {"name": "custom", "id": action["id"]}})
    full = fake_anthropic.main_bodies[-2]
    assert 1 < len(full["messages"]) <= 6
    assert "British" in json.dumps(full["system"]) and "generate_artifact" in json.dumps(full["system"])

    # memories reach every turn's system prompt; the reflect tool adds to them
    await turn(ws, fake_anthropic, Reply([ToolUse("reflect", {"facts": ["Writes poems in spring"]})]), Reply("Noted."),
               content="I write poems every spring")
    status, memories = request_json(server, "GET", "/api/memories")
    assert memories == {"styleRules": ["Use British spelling"], "content": ["Likes oaks", "Writes poems in spring"]}
    await turn(ws, fake_anthropic, Reply("ok"), content="thanks")
    assert "Writes poems in spring" in json.dumps(fake_anthropic.last_main.body["system"])

    # caching: breakpoints on tools, system and the newest message; the next call reads the cache
    body = fake_anthropic.last_main.body
    assert "cache_control" in body["tools"][-1] and "cache_control" in body["system"][0]
    assert "cache_control" in json.dumps(body["messages"][-1])
    frames = await turn(ws, fake_anthropic, Reply("cached"), content="once more")
    assert frames[-1]["usage"]["cacheReadTokens"] > 0

    # everything is stored and survives a restart
    await ws.close()
    server.stop(signal.SIGTERM)
    server = make_server(data)
    ws, snapshot = await connect(server, conversation_id)
    assert snapshot["title"] == "Spring Poem Drafting"
    assert snapshot["artifact"]["versionCount"] == 7 and snapshot["artifact"]["current"]["content"] == "Haiku two"
    status, version = request_json(server, "GET", f"/api/conversations/{conversation_id}/artifact/versions/3")
    assert status == 200 and version["content"] == v3 and version["source"] == "model"
    status, version = request_json(server, "GET", f"/api/conversations/{conversation_id}/artifact/versions/5")
    assert version["source"] == "user" and version["title"] == "Spring, edited"
    assert request_json(server, "GET", f"/api/conversations/{conversation_id}/artifact/versions/8")[0] == 404
    assert request_json(server, "GET", "/api/memories")[1]["content"][-1] == "Writes poems in spring"
    listed = request_json(server, "GET", "/api/conversations")[1]["conversations"]
    assert listed[0]["title"] == "Spring Poem Drafting"
    await ws.close()


async def test_span_edit_sends_a_window_not_the_artifact(server, fake_anthropic):
    ws, _ = await connect(server)
    big = "".join(f"Paragraph {i}: " + "lorem ipsum dolor sit amet " * 8 + "\n\n" for i in range(400))
    await turn(ws, fake_anthropic, Reply([ToolUse("generate_artifact", {"title": "Big", "type": "text", "content": big})]),
               Reply("ok"), content="write a long one")
    start = big.index("Paragraph 200")
    await turn(ws, fake_anthropic, Reply([ToolUse("update_artifact", {"replacement": "Section 200"})]), Reply("ok"),
               content="rename it", canvas={"highlight": {"start": start, "end": start + 13}})
    sent = main_text(fake_anthropic.main_bodies[-2])
    assert len(big) > 80_000 and len(sent) < 2_500
    body = json.loads((await asyncio.to_thread(urllib.request.urlopen, server.http_url + "/api/conversations")).read())
    assert body["conversations"]
    await ws.close()


@pytest.mark.parametrize("highlight, code", [
    ({"start": 5, "end": 2}, "invalid_highlight"),
    ({"start": 0, "end": 10_000}, "invalid_highlight"),
    ({"start": 0, "end": 3, "selectedText": "nope"}, "invalid_highlight"),
])
async def test_bad_highlights(server, fake_anthropic, highlight, code):
    ws, _ = await connect(server)
    await turn(ws, fake_anthropic, Reply([ToolUse("generate_artifact", {"title": "T", "type": "text",
                                                                        "content": "Hello world"})]),
               Reply("ok"), content="write")
    await send(ws, type="message", content="edit", canvas={"highlight": highlight})
    assert (await recv(ws))["code"] == code
    await ws.close()


async def test_update_without_highlight_needs_a_unique_target(server, fake_anthropic):
    ws, _ = await connect(server)
    frames = await turn(
        ws, fake_anthropic,
        Reply([ToolUse("generate_artifact", {"title": "T", "type": "code", "language": "python",
                                             "content": "x = 1\nx = 1\ny = 2\n"})]),
        Reply([ToolUse("update_artifact", {"target": "x = 1", "replacement": "x = 3"})]),
        Reply([ToolUse("update_artifact", {"target": "z = 9", "replacement": "z = 0"})]),
        Reply([ToolUse("update_artifact", {"target": "y = 2", "replacement": "y = 5"})]),
        Reply("done"), content="write and fix")
    ends = [f for f in frames if f["type"] == "tool_end"]
    assert [e["isError"] for e in ends] == [False, True, True, False]
    results = [b for m in fake_anthropic.last_main.body["messages"] for b in m["content"]
               if isinstance(b, dict) and b.get("type") == "tool_result"]
    assert "occurs 2 times" in json.dumps(results[-3]) and "not found" in json.dumps(results[-2])
    # the span edit travels as one change of one character (PROTOCOL 1.1 artifact_edit)
    edit = [f for f in frames if f["type"] in ("artifact", "artifact_edit")][-1]
    assert edit["type"] == "artifact_edit" and edit["changes"] == [{"start": 16, "end": 17, "text": "5"}]
    status, version = server.get(f"/api/conversations/{frames[0]['conversationId']}/artifact/versions/2")
    assert version["content"] == "x = 1\nx = 1\ny = 5\n" and version["language"] == "python"
    await ws.close()


async def test_exports(server, fake_anthropic):
    ws, session = await connect(server)
    await turn(ws, fake_anthropic, Reply([ToolUse("generate_artifact", {"title": "Spring", "type": "text",
                                                                        "content": POEM})]), Reply("ok"), content="w")
    base = f"{server.http_url}/api/conversations/{session['conversationId']}/artifact/export"
    with urllib.request.urlopen(base + "?format=docx") as response:
        assert "wordprocessingml" in response.headers["Content-Type"]
        assert "Spring.docx" in response.headers["Content-Disposition"]
        document = docx.Document(io.BytesIO(response.read()))
    texts = [(p.style.name, p.text) for p in document.paragraphs if p.text]
    assert {("Title", "Spring"), ("Heading 1", "Spring")} & set(texts) and all("**" not in t for _, t in texts)
    bold = [r.text for p in document.paragraphs for r in p.runs if r.bold]
    assert "first" in bold
    assert any(style.startswith("List Bullet") and text == "rain" for style, text in texts)
    with urllib.request.urlopen(base + "?format=md") as response:
        assert response.read().decode() == POEM
    await ws.close()
    ws, session = await connect(server)
    await turn(ws, fake_anthropic, Reply([ToolUse("generate_artifact", {"title": "Fib", "type": "code",
                                                                        "language": "python",
                                                                        "content": "def fib(n): ..."})]),
               Reply("ok"), content="code")
    with urllib.request.urlopen(f"{server.http_url}/api/conversations/{session['conversationId']}"
                                "/artifact/export?format=code") as response:
        assert response.read() == b"def fib(n): ..." and ".py" in response.headers["Content-Disposition"]
    await ws.close()


async def test_background_reflection_is_debounced_and_cancelled_by_delete(make_server, fake_anthropic):
    delay = 2.0
    server = make_server(CHAT_AGENT_REFLECTION_DELAY=str(delay))
    request_json(server, "DELETE", "/api/memories")

    def is_reflection(body: dict) -> bool:
        return body.get("tool_choice", {}).get("name") == "store_reflections"

    earlier = len([r for r in fake_anthropic.requests if is_reflection(r.body)])  # other tests' (shared fake)

    def reflections() -> int:
        return len([r for r in fake_anthropic.requests if is_reflection(r.body)]) - earlier

    fake_anthropic.enqueue(Reply([ToolUse("store_reflections", {"styleRules": ["Short lines"],
                                                                "content": ["Writes about seasons"]})]),
                           when=is_reflection)
    ws, session = await connect(server)
    await turn(ws, fake_anthropic, Reply([ToolUse("generate_artifact", {"title": "T", "type": "text",
                                                                        "content": "Autumn"})]),
               Reply("ok"), content="write")
    first_end = time.monotonic()
    await asyncio.sleep(0.5)
    await turn(ws, fake_anthropic, Reply("just chatting"), content="hi")  # restarts the wait
    # Past the first turn's deadline, before the second's (it ended 0.5 s later at least),
    # however long the turns took on a loaded machine.
    await asyncio.sleep(max(0.0, first_end + delay + 0.3 - time.monotonic()))
    assert not reflections(), "the newer turn restarted the wait"
    deadline = time.monotonic() + delay + 10
    while request_json(server, "GET", "/api/memories")[1]["styleRules"] != ["Short lines"]:
        assert time.monotonic() < deadline, "the reflection never ran"
        await asyncio.sleep(0.2)
    assert request_json(server, "GET", "/api/memories")[1] == {"styleRules": ["Short lines"],
                                                               "content": ["Writes about seasons"]}
    # a deleted conversation takes its pending reflection with it
    before = reflections()
    ws2, other = await connect(server)
    await turn(ws2, fake_anthropic, Reply([ToolUse("generate_artifact", {"title": "T", "type": "text",
                                                                         "content": "Winter"})]),
               Reply("ok"), content="write")
    assert request_json(server, "DELETE", f"/api/conversations/{other['conversationId']}")[0] == 204
    await asyncio.sleep(delay + 1.0)
    assert reflections() == before
    fake_anthropic.clear()
    await ws.close()


def test_memories_and_quick_actions_belong_to_their_user(make_server):
    server = make_server(CHAT_AGENT_API_KEYS="alice:tok-a,bob:tok-b")

    def call(method: str, path: str, token: str | None, body: object | None = None) -> tuple[int, object]:
        return server.request(method, path, token, body)

    assert call("GET", "/api/memories", None)[0] == 401
    assert call("PUT", "/api/memories", "tok-a", {"styleRules": ["Terse"], "content": []})[0] == 200
    assert call("GET", "/api/memories", "tok-b")[1] == {"styleRules": [], "content": []}
    assert call("PUT", "/api/memories", "tok-a", {"styleRules": "not a list"})[0] == 400
    assert call("PUT", "/api/memories", "tok-a", {"styleRules": ["x" * 5000]})[0] == 400
    status, action = call("POST", "/api/quick-actions", "tok-a", {"title": "Tweet", "prompt": "Make it a tweet."})
    assert status == 201 and action["includeRecentHistory"] is True  # the flags default to true
    assert call("GET", "/api/quick-actions", "tok-b")[1] == {"quickActions": []}
    assert call("PUT", f"/api/quick-actions/{action['id']}", "tok-b", {"title": "Mine"})[0] == 404
    assert call("DELETE", f"/api/quick-actions/{action['id']}", "tok-b")[0] == 404
    assert call("POST", "/api/quick-actions", "tok-a", {"title": "", "prompt": "x"})[0] == 400
    assert call("POST", "/api/quick-actions", "tok-a", {"title": "T", "prompt": "x", "includePrefix": "no"})[0] == 400
    assert [a["title"] for a in call("GET", "/api/quick-actions", "tok-a")[1]["quickActions"]] == ["Tweet"]
    assert call("DELETE", f"/api/quick-actions/{action['id']}", "tok-a")[0] == 204
    assert call("GET", "/api/quick-actions", "tok-a")[1] == {"quickActions": []}
    assert call("DELETE", "/api/memories", "tok-a")[0] == 204
    assert call("GET", "/api/memories", "tok-a")[1] == {"styleRules": [], "content": []}
