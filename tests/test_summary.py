"""Where the history may be cut for a summary: never between a tool_use and its result."""

from __future__ import annotations

from chat_agent.context.summary import choose_cut, render_transcript, summary_message, valid_cut


def user(text: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def assistant(text: str, tool: str | None = None) -> dict:
    content = [{"type": "text", "text": text}]
    if tool:
        content.append({"type": "tool_use", "id": tool, "name": "web_search", "input": {"query": "q"}})
    return {"role": "assistant", "content": content}


def result(tool: str, text: str = "r") -> dict:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool, "content": text}]}


HISTORY = [
    user("a" * 100), assistant("b" * 100),
    user("c" * 100), assistant("d", tool="t1"), result("t1", "e" * 100), assistant("f" * 100),
    user("g" * 100), assistant("h" * 100),
]


def test_valid_cuts_never_separate_a_tool_pair():
    assert not valid_cut(HISTORY, 0)
    assert valid_cut(HISTORY, 2)       # a user turn starts
    assert valid_cut(HISTORY, 3)       # an assistant message: its tool result stays with it
    assert not valid_cut(HISTORY, 4)   # a tool_result whose tool_use would be summarized
    assert valid_cut(HISTORY, 5)


def test_choose_cut_keeps_recent_turns():
    assert choose_cut(HISTORY, keep_chars=150) == 6    # keeps the last exchange
    assert choose_cut(HISTORY, keep_chars=250) == 5    # skips the tool_result cut at 4
    assert choose_cut(HISTORY, keep_chars=10_000) == 1  # nothing keeps that much: the earliest cut


def test_no_cut_possible():
    assert choose_cut([user("only")], keep_chars=1) is None


def test_transcript_and_summary_message():
    transcript = render_transcript(HISTORY[:5])
    assert "USER:" in transcript and "[called tool web_search" in transcript and "[tool result:" in transcript
    merged = summary_message("They talked.", HISTORY[6])
    assert merged["role"] == "user" and "They talked." in merged["content"][0]["text"]
    assert merged["content"][1] == HISTORY[6]["content"][0]
    alone = summary_message("They talked.", HISTORY[5])
    assert alone["role"] == "user" and len(alone["content"]) == 1
