"""The demo model's script on its own: what it reads back of the artifact, and that forced
tools are honoured (titles, highlights, quick actions) without any network."""

from __future__ import annotations

from chat_agent.context.diff import line_diff
from chat_agent.context.prompting import highlight_block
from chat_agent.model.demo import DemoModel
from chat_agent.model.demo_canvas import apply_line_diff, current_artifact
from chat_agent.model.types import ModelRequest, TextDelta, ToolInputDelta
from chat_agent.protocol import Highlight
from chat_agent.store import ArtifactVersionRecord

OLD = "".join(f"line {n}\n" for n in range(30))


def test_line_diff_round_trips():
    for new in (OLD.replace("line 3\n", "three\n"), OLD.replace("line 29\n", ""), "new top\n" + OLD,
                OLD.replace("line 10\n", "ten\nten and a half\n").replace("line 25\n", "")):
        assert apply_line_diff(OLD, line_diff(OLD, new)) == new


def _version(content: str) -> ArtifactVersionRecord:
    return ArtifactVersionRecord(index=2, type="text", title="T", language=None,
                                 content=content, created_at=0.0, source="model")


def test_current_artifact_follows_the_history():
    generate = {"type": "tool_use", "id": "t1", "name": "generate_artifact",
                "input": {"title": "T", "type": "text", "content": OLD}}
    edited = OLD.replace("line 7\n", "seven\n")
    diff = f'<artifact_edit id="a" version="2" base_version="1">\nThe artifact changed. x:\n{line_diff(OLD, edited)}</artifact_edit>'
    start = edited.index("seven")
    excerpt = highlight_block(_version(edited), Highlight(start=start, end=start + 5), "louder")
    update = {"type": "tool_use", "id": "t2", "name": "update_artifact", "input": {"replacement": "SEVEN"}}
    messages = [{"role": "user", "content": "write"}, {"role": "assistant", "content": [generate]},
                {"role": "user", "content": [{"type": "text", "text": diff}, {"type": "text", "text": "hi"}]},
                {"role": "user", "content": [excerpt]}, {"role": "assistant", "content": [update]}]
    known = current_artifact(messages)
    assert known is not None and known.content == edited.replace("seven", "SEVEN")


async def test_forced_tools_and_streaming():
    model = DemoModel(pace=0)
    title = await model.call(ModelRequest(model="demo", max_tokens=50, messages=[
        {"role": "user", "content": "<user>\nwrite a poem about the sea\n</user>\n\n<assistant>\nok\n</assistant>"}],
        tools=[{"name": "set_title"}], tool_choice={"type": "tool", "name": "set_title"}))
    assert title.content[0]["name"] == "set_title" and title.content[0]["input"]["title"] == "Poem Sea"
    start = OLD.index("line 4")
    excerpt = highlight_block(_version(OLD), Highlight(start=start, end=start + 6), "make it louder")
    items = [i async for i in model.stream(ModelRequest(model="demo", max_tokens=50, messages=[
        {"role": "user", "content": [excerpt]}], tools=[{"name": "update_artifact"}],
        tool_choice={"type": "tool", "name": "update_artifact"}))]
    pieces = "".join(i.piece for i in items if isinstance(i, ToolInputDelta))
    assert pieces == '{"replacement": "LINE 4"}' and items[-1].stop_reason == "tool_use"
    # unforced, with nothing to call: a text reply, streamed
    items = [i async for i in model.stream(ModelRequest(model="demo", max_tokens=50, messages=[
        {"role": "user", "content": "hello"}]))]
    assert any(isinstance(i, TextDelta) for i in items) and items[-1].stop_reason == "end_turn"
    assert "demo" in (await model.complete(ModelRequest(model="demo", max_tokens=50, messages=[
        {"role": "user", "content": "summarize this"}]))).lower()


async def test_the_demo_reviewer_judges_and_its_revision_passes():
    """The demo reviewer reads the version: a text without a conclusion fails with a
    suggestion, and the revision the demo makes from that feedback passes."""
    from chat_agent.agent.critic import _feedback
    from chat_agent.agent.review import Subject, review
    from chat_agent.model.demo_canvas import Known, revise
    from chat_agent.protocol import ArtifactTarget

    draft = "# Tea\n\n## Key points\n\n- Use fresh water\n- Steep for three minutes\n"
    verdict, used = await review(DemoModel(pace=0), "demo", Subject("write a guide", None, after=_version(draft)))
    assert not verdict.passed and 0 <= verdict.score < 1 and "conclusion" in verdict.feedback and used.output_tokens > 0
    assert verdict.suggestions
    feedback = _feedback(ArtifactTarget(index=2), verdict.score, verdict.feedback, verdict.suggestions, None)
    revised = revise(Known(draft), feedback)
    assert revised.startswith(draft) and "## Conclusion" in revised and "use fresh water" in revised
    verdict, _ = await review(DemoModel(pace=0), "demo", Subject("write a guide", None, after=_version(revised)))
    assert verdict.passed and "Demo" in verdict.feedback


def test_the_demo_reads_documents_as_the_server_shows_them():
    """What `attached` reads is what chat_agent.files shows a model: a whole document (pages
    marked), a long one's description, text a client extracted; the user's words stay apart."""
    from chat_agent.files.documents import ParsedDocument, render_for_model
    from chat_agent.model.demo_docs import attached, search_term

    small = ParsedDocument("minutes \"May\".pdf", "application/pdf", "page",
                           ["The board met on Monday.", "The budget grew."])
    big = ParsedDocument("annual.pdf", "application/pdf", "page", ["Report page. " * 40] * 12)
    blocks = [{"type": "text", "text": f"[document file_a1]\n{render_for_model(small)}"},
              {"type": "text", "text": f"[document file_b2]\n{render_for_model(big, inline_limit=100)}"},
              {"type": "text", "text": '<document filename="notes.txt">\nLaunch on Friday.\n</document>'},
              {"type": "text", "text": "When is the launch?"}]
    found = attached(blocks)
    assert [(d.name, d.file_id, d.parts) for d in found] == [
        ('minutes "May".pdf', "file_a1", 2), ("annual.pdf", "file_b2", 12), ("notes.txt", None, 1)]
    assert found[0].text == "The board met on Monday.\n\nThe budget grew." and found[1].text is None
    assert search_term("Where is the xylophone budget discussed?") == "xylophone"
    assert search_term("Summarize it") is None


async def test_an_attached_document_is_answered_not_written_into_the_draft():
    """With a draft in the history and a document attached, the demo answers from the
    document; no rewrite, and no `[document …]` text anywhere in what it writes."""
    model = DemoModel(pace=0)
    generate = {"type": "tool_use", "id": "t1", "name": "generate_artifact",
                "input": {"title": "T", "type": "text", "content": OLD}}
    doc = {"type": "text", "text": '[document file_x]\n<document filename="a.md">\nThe launch is on Friday.\n</document>'}
    messages = [{"role": "user", "content": "write"}, {"role": "assistant", "content": [generate]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
                {"role": "user", "content": [doc, {"type": "text", "text": "When is the launch?"}]}]
    tools = [{"name": n} for n in ("generate_artifact", "rewrite_artifact", "web_search", "update_plan")]
    reply = await model.call(ModelRequest(model="demo", max_tokens=50, messages=messages, tools=tools))
    assert [b["type"] for b in reply.content] == ["text"] and "The launch is on Friday." in reply.content[0]["text"]
    # a quick action (a forced rewrite) after it: the action's words, never the document's token
    messages += [{"role": "assistant", "content": reply.content},
                 {"role": "user", "content": [doc, {"type": "text", "text": "Make it sound like a sea shanty."}]}]
    forced = await model.call(ModelRequest(model="demo", max_tokens=50, messages=messages, tools=tools,
                                           tool_choice={"type": "tool", "name": "rewrite_artifact"}))
    rewritten = forced.content[0]["input"]["content"]
    assert "sea shanty" in rewritten and "[document" not in rewritten
