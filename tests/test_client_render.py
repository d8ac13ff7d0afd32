"""Unit tests of the client's pure parts: rendering, the token bar, seq ordering, turn
outcomes and exit codes. The network side is exercised end to end against the real server."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import pytest

from chat_agent.client import ChatError, ProtocolMismatch, TurnDone, parse_frame
from chat_agent.client.cli import build_parser, exit_code, settings_from
from chat_agent.client.render import (tool_summary, CLEAR_LINE, Out, Style, TurnRenderer, banner, frame_json,
                                      render_history, token_bar)
from chat_agent.client.sequencer import SeqOrderer
from chat_agent.client.turn import Receive, collect_turn
from chat_agent.client.wire import fatal_close, full_url
from chat_agent.protocol import AnyServerFrame, Done, ErrorFrame, SessionFrame, server_frames

PLAIN = Style(color=False)


def frame(type_: str, seq: int | None = None, **fields: Any) -> AnyServerFrame:
    """A server frame as the wire would carry it (camelCase keys), parsed like the client does."""
    raw = {"type": type_, "conversationId": "c1", **fields}
    if seq is not None:
        raw["seq"] = seq
    return server_frames.validate_python(raw)


def chunk(text: str, seq: int | None = None) -> AnyServerFrame:
    return frame("content_chunk", seq, messageId="m1", content=text)


def done(stop: str = "end_turn", seq: int | None = None) -> Done:
    result = frame("done", seq, messageId="m1", stopReason=stop, usage={"inputTokens": 3})
    assert isinstance(result, Done)
    return result


def error(code: str, seq: int | None = None) -> ErrorFrame:
    result = frame("error", seq, code=code, message=f"{code} happened")
    assert isinstance(result, ErrorFrame)
    return result


def text_of(pieces: list[Out], reply: bool | None = None) -> str:
    return "".join(p.text for p in pieces if reply is None or p.reply == reply)


def render_all(renderer: TurnRenderer, frames: list[AnyServerFrame]) -> list[Out]:
    return [piece for f in frames for piece in renderer.render(f)]


# ---- token bar and styles ---------------------------------------------------------------

@pytest.mark.parametrize("tokens, maximum, bar", [
    (0, 200_000, "[░░░░░░░░░░] 0 / 200,000 tokens"),
    (100_000, 200_000, "[█████░░░░░] 100,000 / 200,000 tokens"),
    (41_203, 200_000, "[██░░░░░░░░] 41,203 / 200,000 tokens"),
    (250_000, 200_000, "[██████████] 250,000 / 200,000 tokens"),  # over the limit: full, not wider
    (5, 0, "[░░░░░░░░░░] 5 / 0 tokens"),  # no maximum known: no division by zero
])
def test_token_bar(tokens: int, maximum: int, bar: str) -> None:
    assert token_bar(tokens, maximum, PLAIN) == bar


def test_token_bar_colours_the_filled_part_by_how_full() -> None:
    colour = Style(color=True)
    assert "\x1b[32m" in token_bar(10, 100, colour)  # green
    assert "\x1b[31m" in token_bar(95, 100, colour)  # red
    assert "\x1b[" not in token_bar(95, 100, PLAIN)


class FakeTty(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


@pytest.mark.parametrize("tty, env, color", [
    (True, {}, True), (False, {}, False), (True, {"NO_COLOR": "1"}, False), (True, {"NO_COLOR": ""}, True),
])
def test_colour_only_on_a_terminal_without_no_color(tty: bool, env: dict[str, str], color: bool) -> None:
    assert Style.for_stream(FakeTty(tty), env).color is color


# ---- turn rendering -----------------------------------------------------------------------

def test_reply_pieces_are_the_text_parts_a_blank_line_apart_plus_a_final_newline() -> None:
    """As the page shows a message and `content` joins its parts: text, a tool card, text."""
    renderer = TurnRenderer(PLAIN)
    frames = [frame("thinking_chunk", 1, messageId="m1", content="hmm"), chunk("Let me look.", 2),
              frame("tool_start", 3, messageId="m1", toolId="t1", name="web_search", input={"query": "x"}),
              frame("tool_end", 4, toolId="t1", name="web_search", output={}, duration=0.5),
              chunk(" Found it.", 5), done(seq=6)]
    pieces = render_all(renderer, frames)
    assert text_of(pieces, reply=True) == "Let me look.\n\n Found it.\n"
    assert all(not p.reply for p in pieces if "hmm" in p.text or "▸" in p.text)
    # on a terminal: the text's line, the card, one blank line, the next text
    assert text_of(pieces) == 'hmm\nLet me look.\n▸ web_search {"query": "x"}\n  ✓ web_search 0.5s\n\n Found it.\n'
    # a part that already ends in newlines gets only what a blank line lacks; a turn starts afresh
    more = render_all(renderer, [chunk("One\n\n", 7), frame("review", 8, messageId="m1", reviewId="r1",
                                  target={"kind": "artifact", "index": 1}, passed=True, score=0.9, feedback="ok",
                                  suggestions=[], revision=0), chunk("Two", 9), done(seq=10)])
    assert text_of(more, reply=True) == "One\n\nTwo\n"


def test_tool_card_progress_in_place_and_search_summary() -> None:
    renderer = TurnRenderer(PLAIN, live=True)
    results = [{"title": "Python", "url": "https://python.org"}, {"title": "PEP 8", "url": "https://peps.python.org/pep-0008/"}]
    pieces = render_all(renderer, [
        frame("tool_start", 1, messageId="m1", toolId="t1", name="web_search", input={"query": "python"}),
        frame("tool_progress", 2, toolId="t1", elapsed=1.04, status="Searching the web"),
        frame("tool_progress", 3, toolId="t1", elapsed=3.2, status="Searching the web"),
        frame("tool_end", 4, toolId="t1", name="web_search", output={"results": results}, duration=3.4),
    ])
    assert text_of(pieces) == (
        '▸ web_search {"query": "python"}\n'
        "  … 1.0s Searching the web" + CLEAR_LINE + "  … 3.2s Searching the web" + CLEAR_LINE
        + "  ✓ web_search 3.4s\n    Python — https://python.org\n    PEP 8 — https://peps.python.org/pep-0008/\n")


def test_progress_is_not_drawn_off_a_terminal() -> None:
    renderer = TurnRenderer(PLAIN, live=False)
    assert renderer.render(frame("tool_progress", 1, toolId="t1", elapsed=2.0, status="Running")) == []
    assert renderer.render(frame("artifact_chunk", 2, toolId="t1", content="abc")) == []


def test_live_status_waits_in_place_and_a_retry_gets_a_line() -> None:
    waiting = [frame("status", messageId="m1", state="waiting_model", detail="The model has not answered yet.",
                     elapsed=e) for e in (5.01, 10.0)]
    retry = frame("status", messageId="m1", state="retrying", elapsed=12.5,
                  detail="The model API is overloaded (529); trying again in 0.5 s (attempt 2 of 3).")
    pieces = render_all(TurnRenderer(PLAIN, live=True), [*waiting, retry, chunk("Hi.", 1)])
    assert text_of(pieces) == (
        "  … 5s The model has not answered yet." + CLEAR_LINE + "  … 10s The model has not answered yet."
        + CLEAR_LINE + "↻ The model API is overloaded (529); trying again in 0.5 s (attempt 2 of 3).\nHi.")
    off_terminal = render_all(TurnRenderer(PLAIN, live=False), [*waiting, retry])
    assert text_of(off_terminal) == "↻ The model API is overloaded (529); trying again in 0.5 s (attempt 2 of 3).\n"


def test_failed_tool_shows_a_cross_and_the_error() -> None:
    renderer = TurnRenderer(PLAIN)
    out = text_of(renderer.render(frame("tool_end", 1, toolId="t1", name="code_interpreter",
                                        output={"error": "cancelled by abort"}, duration=0.25, isError=True)))
    assert out == "  ✗ code_interpreter 0.2s cancelled by abort\n"


def test_a_card_starts_on_its_own_line_after_streamed_text() -> None:
    renderer = TurnRenderer(PLAIN)
    pieces = render_all(renderer, [chunk("Searching", 1), frame(
        "tool_start", 2, messageId="m1", toolId="t1", name="web_search", input={"query": "q"})])
    assert text_of(pieces) == 'Searching\n▸ web_search {"query": "q"}\n'
    assert text_of(pieces, reply=True) == "Searching\n"  # the text part ends on its line


def test_done_shows_stop_reason_and_token_bar_once_per_turn() -> None:
    renderer = TurnRenderer(PLAIN)
    pieces = render_all(renderer, [
        chunk("partial", 1),
        frame("context_update", 2, tokens=41_203, maxTokens=200_000, summarized=True),
        done("aborted", 3),
    ])
    assert text_of(pieces) == ("partial\n⏹ aborted\n"
                               "[██░░░░░░░░] 41,203 / 200,000 tokens · older history summarized\n")
    # The summary note belongs to the turn that summarized, not to the next.
    assert "summarized" not in text_of(render_all(renderer, [chunk("next", 4), done(seq=5)]))


def test_a_refusal_shows_its_explanation() -> None:
    refused = frame("done", 2, messageId="m1", stopReason="refusal", detail="This request was refused due to policy.")
    pieces = render_all(TurnRenderer(PLAIN), [chunk("I can", 1), refused])
    assert text_of(pieces) == "I can\n(the model refused) This request was refused due to policy.\n"
    # on a reply that ended well, `detail` says what the provider could not do
    degraded = frame("done", 4, messageId="m2", stopReason="end_turn", detail="Thinking is not available on m.")
    assert text_of(render_all(TurnRenderer(PLAIN), [chunk("Hi", 3), degraded])) == \
        "Hi\n(Thinking is not available on m.)\n"


def test_clear_context_shows_the_new_bar() -> None:
    renderer = TurnRenderer(PLAIN)
    pieces = render_all(renderer, [frame("context_cleared", 7),
                                   frame("context_update", 8, tokens=0, maxTokens=200_000)])
    assert text_of(pieces) == "context cleared\n[░░░░░░░░░░] 0 / 200,000 tokens\n"


def test_error_frame_is_red_with_its_code() -> None:
    pieces = TurnRenderer(Style(color=True)).render(error("rate_limited", 3))
    assert text_of(pieces) == "\x1b[31m✗ error [rate_limited] rate_limited happened\x1b[0m\n"


def test_thinking_is_dimmed_and_separated_from_the_reply() -> None:
    renderer = TurnRenderer(Style(color=True))
    pieces = render_all(renderer, [frame("thinking_chunk", 1, messageId="m1", content="why"), chunk("Because", 2)])
    assert pieces == [Out("\x1b[2mwhy\x1b[0m"), Out("\n"), Out("Because", reply=True)]


def test_history_from_a_session_snapshot() -> None:
    session = frame("session", 12, title="Trip", context={"tokens": 10, "maxTokens": 100}, messages=[
        {"id": "u1", "role": "user", "content": "Find flights", "createdAt": 1.0},
        {"id": "a1", "role": "assistant", "content": "Here are two.", "createdAt": 2.0, "status": "aborted",
         "toolCalls": [{"toolId": "t1", "name": "web_search", "input": {"query": "flights"},
                        "output": {"results": [{"title": "Air", "url": "https://air.example"}]}, "duration": 1.5}]},
    ], artifact={"id": "a", "currentIndex": 2, "versionCount": 3,
                 "current": {"index": 2, "type": "code", "title": "plan.py", "language": "python", "content": ""}})
    assert isinstance(session, SessionFrame)
    assert render_history(session, PLAIN) == "\n".join([
        "Trip", "you › Find flights", '▸ web_search {"query": "flights"}', "  ✓ web_search 1.5s",
        "    Air — https://air.example", "Here are two.", "(aborted)", "▣ plan.py v2/3 (code, python)"])


def test_history_shows_a_reply_in_the_order_of_its_parts() -> None:
    # As the live turn drew it: text, the tool card, more text; thinking dimmed where it came.
    session = frame("session", 9, context={"tokens": 10, "maxTokens": 100}, features=["parts"], messages=[
        {"id": "u1", "role": "user", "createdAt": 1.0, "parts": [
            {"type": "text", "text": "Find cats"},
            {"type": "attachment", "kind": "image", "fileId": "f1", "url": "/api/uploads/f1",
             "filename": "cat.png", "mediaType": "image/png", "width": 64, "height": 48}]},
        {"id": "a1", "role": "assistant", "createdAt": 2.0, "parts": [
            {"type": "thinking", "text": "Search first."},
            {"type": "text", "text": "Calling tools."},
            {"type": "tool", "toolId": "t1", "name": "web_search", "input": {"query": "cats"},
             "output": {"results": [{"title": "Cats", "url": "https://cats.example"}]}, "isError": False,
             "duration": 0.5},
            {"type": "text", "text": "Done: cats."}]},
    ])
    assert isinstance(session, SessionFrame)
    assert render_history(session, PLAIN) == "\n".join([
        "you › Find cats", "  📎 cat.png 64×48 /api/uploads/f1", "Search first.", "Calling tools.",
        '▸ web_search {"query": "cats"}', "  ✓ web_search 0.5s", "    Cats — https://cats.example", "", "Done: cats."])
    assert session.messages[1].content == "Calling tools.\n\nDone: cats."


def test_banner_names_disabled_tools_and_why() -> None:
    session = frame("session", 0, context={"tokens": 0, "maxTokens": 1}, tools=[
        {"name": "web_search", "enabled": False, "reason": "EXA_API_KEY not set"}, {"name": "reflect", "enabled": True}])
    assert banner(session, PLAIN) == "conversation c1 · /help for commands · off: web_search (EXA_API_KEY not set)"


def test_json_lines_keep_the_wire_keys_only() -> None:
    raw = {"type": "pong", "conversationId": "c1"}
    assert json.loads(frame_json(parse_frame(json.dumps(raw)))) == raw


# ---- parsing and the wire -----------------------------------------------------------------

def test_a_frame_the_protocol_does_not_know_is_a_clear_error() -> None:
    with pytest.raises(ProtocolMismatch, match="content_chunk"):
        parse_frame('{"type": "content_chunk", "conversationId": "c1", "seq": 1}')
    with pytest.raises(ProtocolMismatch, match="binary"):
        parse_frame(b"{}")


def test_url_carries_token_and_conversation() -> None:
    url = full_url("ws://h:1/api/chat-agent?x=1", "t k", "c/1")
    assert url == "ws://h:1/api/chat-agent?x=1&conversationId=c%2F1&token=t+k"
    assert full_url("ws://h/p", None, None) == "ws://h/p"


@pytest.mark.parametrize("code, fatal", [(1000, False), (1001, False), (1006, False), (1011, False),
                                         (1012, False), (1008, True), (4401, True), (4404, True)])
def test_which_close_codes_end_reconnecting(code: int, fatal: bool) -> None:
    assert fatal_close(code) is fatal


# ---- seq ordering -------------------------------------------------------------------------

def seqs(frames: list[AnyServerFrame]) -> list[int | None]:
    return [f.seq for f in frames]


def test_in_order_frames_pass_and_duplicates_are_dropped() -> None:
    order: SeqOrderer[AnyServerFrame] = SeqOrderer(last_seq=4)
    assert seqs(order.push(chunk("a", 5), 0)) == [5]
    assert order.push(chunk("a", 5), 0) == []  # a replayed frame seen live already
    assert order.push(chunk("old", 3), 0) == []  # covered by the session snapshot
    assert seqs(order.push(frame("pong"), 0)) == [None]  # not in the log: passes as it comes
    assert order.last_seq == 5 and order.deadline() is None


def test_live_frames_wait_for_the_replay_that_precedes_them() -> None:
    # After a reconnect at last_seq 2, live 5 and 6 arrive before the replay of 3..6.
    order: SeqOrderer[AnyServerFrame] = SeqOrderer(last_seq=2, gap_timeout=2.0)
    assert order.push(chunk("e", 5), 10.0) == []
    assert order.push(chunk("f", 6), 10.1) == []
    assert order.deadline() == 12.0
    assert seqs(order.push(chunk("c", 3), 10.5)) == [3]
    assert order.deadline() == 12.5  # progress restarts the wait
    assert seqs(order.push(chunk("d", 4), 10.6)) == [4, 5, 6]
    assert order.push(chunk("e", 5), 10.7) == [] and order.push(chunk("f", 6), 10.7) == []
    assert order.last_seq == 6 and order.gaps == [] and order.waiting == 0


def test_a_gap_the_server_cannot_fill_is_skipped_after_the_timeout() -> None:
    order: SeqOrderer[AnyServerFrame] = SeqOrderer(last_seq=2, gap_timeout=1.0)
    order.push(chunk("x", 6), 5.0)
    order.push(chunk("y", 7), 5.2)
    assert order.expire(5.9) == []  # not yet
    assert seqs(order.expire(6.0)) == [6, 7]
    assert order.gaps == [(3, 5)] and order.last_seq == 7 and order.deadline() is None


def test_every_seq_once_in_order_whatever_the_arrival() -> None:
    order: SeqOrderer[AnyServerFrame] = SeqOrderer()
    arrivals = [1, 2, 5, 3, 5, 4, 2, 6, 8, 7, 7, 1]
    delivered = [f.seq for n in arrivals for f in order.push(chunk(str(n), n), 0.0)]
    assert delivered == [1, 2, 3, 4, 5, 6, 7, 8]


def test_rewind_delivers_again_what_an_explicit_resume_replays() -> None:
    order: SeqOrderer[AnyServerFrame] = SeqOrderer(last_seq=9)
    assert order.rewind(6, 0.0) == []
    assert seqs(order.push(chunk("g", 7), 0.0)) == [7]


# ---- turn outcomes ------------------------------------------------------------------------

def scripted(frames: list[AnyServerFrame]) -> Receive:
    """A `receive` that hands out these frames, then times out (as a silent server would)."""
    queue = list(frames)

    async def receive(timeout: float | None) -> AnyServerFrame:
        if not queue:
            raise TimeoutError
        return queue.pop(0)

    return receive


def run_collect(frames: list[AnyServerFrame], **kwargs: Any) -> TurnDone:
    return asyncio.run(collect_turn(scripted(frames), **kwargs))


def test_a_turn_returns_its_done_with_text_and_frames() -> None:
    seen: list[AnyServerFrame] = []

    async def on_frame(f: AnyServerFrame) -> None:  # async callbacks are awaited
        seen.append(f)

    result = run_collect([chunk("Hel", 1), chunk("lo", 2), done(seq=3)], on_frame=on_frame)
    assert isinstance(result, Done) and result.stop_reason == "end_turn" and result.error is None
    assert result.text == "Hello" and len(result.frames) == 3 and seen == result.frames
    assert result.usage.input_tokens == 3


def test_a_rejected_message_raises_at_once() -> None:
    with pytest.raises(ChatError) as caught:
        run_collect([error("busy"), done(seq=9)])
    assert caught.value.code == "busy" and caught.value.done is None


@pytest.mark.parametrize("code", ["llm_error", "rate_limited"])
def test_model_errors_end_the_turn_with_done_and_keep_the_error(code: str) -> None:
    result = run_collect([chunk("a", 1), error(code, 2), done("error", 3)])
    assert result.stop_reason == "error" and result.error is not None and result.error.code == code


def test_an_internal_error_raises_after_reading_its_done() -> None:
    receive = scripted([error("internal", 1), done("error", 2), chunk("next turn", 3)])
    with pytest.raises(ChatError) as caught:
        asyncio.run(collect_turn(receive))
    assert caught.value.code == "internal" and caught.value.done is not None
    assert caught.value.done.stop_reason == "error"


def test_an_error_without_a_following_done_raises_after_the_grace() -> None:
    with pytest.raises(ChatError, match="internal"):
        run_collect([error("internal", 1)], error_grace=0.01)


# ---- exit codes and options ---------------------------------------------------------------

@pytest.mark.parametrize("stop, code", [("end_turn", 0), ("max_tokens", 0), ("max_steps", 0),
                                        ("aborted", 1), ("refusal", 1), ("error", 1)])
def test_exit_code_by_stop_reason(stop: str, code: int) -> None:
    assert exit_code(done(stop), None) == code


def test_exit_code_is_1_on_an_error_frame_even_when_done_followed() -> None:
    assert exit_code(None, error("llm_error")) == 1
    assert exit_code(done("end_turn"), error("llm_error")) == 1


def test_options_and_their_environment_defaults() -> None:
    env = {"CHAT_AGENT_URL": "ws://example:9/api/chat-agent", "CHAT_AGENT_TOKEN": "tok"}
    args = build_parser(env).parse_args(["--thinking", "--no-web-search", "--model", "m", "-m", "hi"])
    assert (args.url, args.token, args.message) == ("ws://example:9/api/chat-agent", "tok", "hi")
    assert settings_from(args) == {"webSearch": False, "thinking": True, "model": "m"}
    defaults = build_parser({}).parse_args([])
    assert defaults.url == "ws://127.0.0.1:8000/api/chat-agent" and defaults.token is None
    assert settings_from(defaults) == {"webSearch": True, "thinking": False}


def test_tool_cards_show_where_made_files_are():
    image = {"imageId": "file_1", "url": "/api/uploads/file_1", "width": 1024, "height": 768}
    assert "1024×768 /api/uploads/file_1" in tool_summary("generate_image", image, False, 2.0, Style())
    code = {"stdout": "", "files": [{"url": "/api/uploads/file_2", "width": 10, "height": 20}]}
    assert "10×20 /api/uploads/file_2" in tool_summary("code_interpreter", code, False, 0.5, Style())
    research = {"report": "…", "sources": [{"n": 1, "title": "T", "url": "https://a.example/x"}]}
    assert "[1] https://a.example/x" in tool_summary("deep_research", research, False, 9.0, Style())
    assert tool_summary("reflect", "ok", False, 0.1, Style()).count("\n") == 0


def test_research_flag_asks_for_deep_research():
    args = build_parser({}).parse_args(["--research", "--attach", "a.pdf", "--attach", "b.png"])
    assert settings_from(args)["enableDeepResearch"] is True and args.attach == ["a.pdf", "b.png"]


def test_an_artifact_edit_is_one_line_saying_how_much_changed() -> None:
    renderer = TurnRenderer(PLAIN)
    edit = frame("artifact_edit", 5, artifactId="a", baseIndex=2, index=3,
                 changes=[{"start": 4, "end": 9, "text": "earliest"}, {"start": 20, "end": 20, "text": "!!"}])
    assert text_of(renderer.render(edit)) == "▣ v3: v2 edited (10 characters)\n"
    retitled = frame("artifact_edit", 6, artifactId="a", baseIndex=3, index=4, changes=[], title="Spring")
    assert text_of(renderer.render(retitled)) == "▣ Spring v4: v3 edited (0 characters)\n"
