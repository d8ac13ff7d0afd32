"""Prompt caching across artifact changes, from a real client against the fake API's cache
(which keys the message cache by tool_choice, as the real one does): the turn after the
user's edit, a version selection or a highlight edit reads the history from the cache and
is shown the change, not the whole artifact again."""

from __future__ import annotations

import json

from tests.fakes.anthropic_fake import Reply, ToolUse
from tests.support import connect, recv, send, until

DOC = "".join(f"## Part {n}\n\nLine {n} of a guide that the user and the model write together.\n\n"
              for n in range(60))


def last_message(body: dict) -> str:
    return json.dumps(body["messages"][-1], ensure_ascii=False)


def total(usage: dict) -> int:
    return usage["inputTokens"] + usage["cacheWriteTokens"] + usage["cacheReadTokens"]


def read_share(usage: dict) -> float:
    return usage["cacheReadTokens"] / total(usage)


async def turn(ws, fake, *replies, **message) -> dict:
    """The turn's `done.usage`."""
    fake.enqueue(*replies)
    await send(ws, type="message", **message)
    return (await until(ws, "done"))[-1]["usage"]


async def change(ws, **frame) -> None:
    """The user's own change; the server answers with the new version."""
    await send(ws, **frame)
    answer = await recv(ws)
    assert answer["type"] in ("artifact", "artifact_edit"), answer


async def test_the_turn_after_an_artifact_change_reads_the_history_from_cache(server, fake_anthropic):
    fake = fake_anthropic
    ws, _ = await connect(server)
    await turn(ws, fake, Reply([ToolUse("generate_artifact", {"title": "Guide", "type": "text", "content": DOC})]),
               Reply("Written."), content="write a guide")
    previous = await turn(ws, fake, Reply("Glad you like it."), content="thanks")

    # the user's own edit: shown as an edit of the version the model wrote, after the cached history
    edited = DOC.replace("Line 30 of a guide", "Line 30, reworded by hand, of a guide")
    await change(ws, type="edit_artifact", content=edited)
    usage = await turn(ws, fake, Reply("I see."), content="what do you think?")
    shown = last_message(fake.main_bodies[-1])
    assert "<artifact_edit " in shown and 'version=\\"2\\" base_version=\\"1\\"' in shown
    assert "-Line 30 of a guide" in shown and "+Line 30, reworded by hand, of a guide" in shown
    assert "Line 50 of a guide" not in shown  # the change, not the whole artifact
    assert usage["cacheReadTokens"] >= total(previous)  # everything the previous turn sent
    assert read_share(usage) >= 0.8, usage

    # selecting the first version again: shown as the edit back
    await change(ws, type="select_artifact_version", index=1)
    usage = await turn(ws, fake, Reply("Back to it."), content="I prefer the first one")
    shown = last_message(fake.main_bodies[-1])
    assert 'version=\\"1\\" base_version=\\"2\\"' in shown and "+Line 30 of a guide" in shown
    assert read_share(usage) >= 0.8, usage

    # a highlight edit: the forced call gets the excerpt alone (a forced tool_choice reads no
    # message from the cache); the reply after it has the whole history, read from the cache
    start = DOC.index("Line 40")
    usage = await turn(ws, fake, Reply([ToolUse("update_artifact", {"replacement": "Row 40"})]), Reply("Done."),
                       content="call it a row", canvas={"highlight": {"start": start, "end": start + len("Line 40")}})
    forced, after = fake.main_bodies[-2:]
    assert forced["tool_choice"] == {"type": "tool", "name": "update_artifact"} and len(forced["messages"]) == 1
    assert "<highlight>Line 40</highlight>" in last_message(forced)
    assert "tool_choice" not in after and len(after["messages"]) > 8
    assert read_share(usage) >= 0.8, usage
    # the model knows what its own edit did: the next turn is not shown the artifact again
    usage = await turn(ws, fake, Reply("Fine."), content="good")
    assert "<artifact" not in last_message(fake.main_bodies[-1]) and read_share(usage) >= 0.8

    # a change larger than half the artifact is shown whole
    await change(ws, type="edit_artifact", content="A different guide altogether.\n" * 20)
    await turn(ws, fake, Reply("New one."), content="I rewrote it")
    shown = last_message(fake.main_bodies[-1])
    assert "<artifact title=" in shown and "A different guide altogether." in shown

    # after clear_context the history holds no version: the current one is shown whole
    await change(ws, type="edit_artifact", content="A different guide altogether.\n" * 19 + "The end.\n")
    await send(ws, type="clear_context")
    await until(ws, "context_update")
    await turn(ws, fake, Reply("Hello again."), content="start over")
    shown = last_message(fake.main_bodies[-1])
    assert "<artifact title=" in shown and "The end." in shown and "<artifact_edit" not in shown
    await ws.close()


async def test_a_change_is_shown_whole_when_a_summary_is_due(make_server, fake_anthropic):
    """The summary before the turn's first call would drop the version an edit applies to."""
    server = make_server(CHAT_AGENT_SUMMARY_CHARS="7000")
    try:
        await _summary_due(server, fake_anthropic)
    finally:
        fake_anthropic.clear()  # other tests look for their own summary call in the shared log


async def _summary_due(server, fake_anthropic) -> None:
    ws, _ = await connect(server)
    await turn(ws, fake_anthropic, Reply([ToolUse("generate_artifact", {"title": "Guide", "type": "text",
                                                                        "content": DOC})]),
               Reply("Written."), content="write a guide")
    await change(ws, type="edit_artifact", content=DOC.replace("Line 30 of", "Line 30, by hand, of"))
    await turn(ws, fake_anthropic, Reply("I see."), content="a small change")
    assert "<artifact_edit " in last_message(fake_anthropic.main_bodies[-1])  # no summary due yet
    await change(ws, type="edit_artifact", content=DOC.replace("Line 31 of", "Line 31, by hand, of"))
    fake_anthropic.enqueue(Reply("I see."))
    await send(ws, type="message", content="and another, with a long note: " + "z" * 2_000)
    frames = await until(ws, "done")
    assert any(f["type"] == "context_update" and f["summarized"] for f in frames)
    body = fake_anthropic.main_bodies[-1]
    assert "<conversation_summary>" in json.dumps(body["messages"][0])
    shown = last_message(body)
    assert "<artifact title=" in shown and "Line 31, by hand, of" in shown and "<artifact_edit" not in shown
    await ws.close()
