"""The Python client against the real server: scripted runs, exit codes, reconnect and resume."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

from chat_agent.client import ChatClient
from tests import reaper
from tests.fakes.anthropic_fake import Fault, Reply, Text, ToolUse
from tests.samples import make_pdf, make_png
from tests.support import ROOT, ServerProcess
from tests.terminal import Terminal


def run_client(server: ServerProcess, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return reaper.run([sys.executable, "-m", "chat_agent.client", "--url", server.ws_url, *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, input=stdin)


def test_scripted_message_prints_the_reply(server, fake_anthropic):
    fake_anthropic.enqueue(Reply([ToolUse("web_search", {"query": "client"})]), Reply("The answer is 42."))
    result = run_client(server, "--message", "what is it?")
    assert result.returncode == 0, result.stderr
    assert "The answer is 42." in result.stdout
    assert "web_search" in result.stderr  # tool cards go to stderr, the reply to stdout


def test_scripted_error_exits_non_zero(server, fake_anthropic):
    fake_anthropic.enqueue(Fault.status(400, message="messages: nope"))
    result = run_client(server, "--message", "fail please")
    assert result.returncode == 1
    assert "llm_error" in result.stderr


def test_attachments_from_the_command_line(server, fake_anthropic, tmp_path):
    pdf, png = tmp_path / "minutes.pdf", tmp_path / "chart.png"
    pdf.write_bytes(make_pdf([["The board met on Monday."]]))
    png.write_bytes(make_png())
    fake_anthropic.enqueue(Reply("They met on Monday; the chart is red."))
    result = run_client(server, "--attach", str(pdf), "--attach", str(png), "--message", "summarize")
    assert result.returncode == 0, result.stderr
    assert "They met on Monday" in result.stdout
    content = fake_anthropic.last_main.body["messages"][-1]["content"]
    assert "The board met on Monday." in str(content) and any(b["type"] == "image" for b in content)
    (tmp_path / "fake.png").write_text("not an image")
    refused = run_client(server, "--attach", str(tmp_path / "fake.png"), "--message", "look")
    assert refused.returncode == 1 and "fake.png" in refused.stderr and "HTTP 415" in refused.stderr
    missing = run_client(server, "--attach", str(tmp_path / "nope.pdf"), "--message", "look")
    assert missing.returncode == 1 and "cannot read" in missing.stderr


def test_attach_in_an_interactive_session(server, fake_anthropic, tmp_path):
    doc = tmp_path / "notes.md"
    doc.write_text("# Notes\nThe launch is on Friday.\n")
    fake_anthropic.enqueue(Reply("Friday."), Reply("No attachment this time."))
    result = run_client(server, stdin=f"/attach {doc}\nwhen is the launch?\nand now?\n/quit\n")
    assert result.returncode == 0, result.stderr
    assert "attached" in result.stdout and "Friday." in result.stdout
    first, second = fake_anthropic.main_bodies[-2:]
    assert "The launch is on Friday." in str(first["messages"][-1]["content"])
    assert "The launch is on Friday." not in str(second["messages"][-1]["content"])


def test_unreachable_server_exits_2(tmp_path):
    result = reaper.run([sys.executable, "-m", "chat_agent.client", "--url", "ws://127.0.0.1:9/api/chat-agent",
                             "--message", "hi"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr


def test_piped_session_continues_a_conversation(server, fake_anthropic):
    fake_anthropic.enqueue(Reply("first reply"))
    first = run_client(server, "--json", "--message", "remember me")
    assert first.returncode == 0
    conversation_id = next(line for line in first.stdout.splitlines() if '"conversationId"' in line)
    conversation_id = conversation_id.split('"conversationId":"')[1].split('"')[0]
    fake_anthropic.enqueue(Reply("second reply"))
    result = run_client(server, "--conversation", conversation_id, stdin="and again\n/id\n/quit\n")
    assert result.returncode == 0, result.stderr
    assert "second reply" in result.stdout and conversation_id in result.stdout + result.stderr
    assert len(fake_anthropic.last_main.body["messages"]) == 3


def test_a_continued_conversation_shows_its_replies_in_order(server, fake_anthropic, exa):
    fake_anthropic.enqueue(Reply([Text("Calling tools."), ToolUse("web_search", {"query": "order"})]),
                           Reply("Done: in order."))
    first = run_client(server, "--json", "--message", "search")
    assert first.returncode == 0, first.stderr
    conversation_id = first.stdout.split('"conversationId":"')[1].split('"')[0]
    result = run_client(server, "--conversation", conversation_id, stdin="/quit\n")
    assert result.returncode == 0, result.stderr
    shown = result.stdout + result.stderr
    # text, the tool card, text: as the turn was drawn live, not the card first
    assert shown.index("Calling tools.") < shown.index("▸ web_search") < shown.index("Done: in order.")


async def test_client_reconnects_and_resumes_across_a_restart(tmp_path, fake_anthropic, fake_exa):
    from tests.conftest import server_env
    server = ServerProcess(tmp_path / "data", server_env(fake_anthropic, fake_exa)).start()
    try:
        async with ChatClient(server.ws_url, reconnect=True, reconnect_timeout=30) as client:
            # Longer than a stopping server lets a turn run on (5 s): it is handed over.
            fake_anthropic.enqueue(Reply("slow " * 400, chunk_size=5, delay=0.03), Reply(" and the end."))
            await client.send_message("go")
            seen = [await client.receive(timeout=10) for _ in range(5)]
            server.stop(signal.SIGTERM)
            server.start()  # same port, same data: the client finds it again
            frames = seen
            while frames[-1].type != "done":
                frames.append(await client.receive(timeout=30))
            assert client.reconnects >= 1
            seqs = [f.seq for f in frames]
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
            # The restarted server went on with the reply (the stopping one handed it over).
            assert frames[-1].stop_reason == "end_turn"
            assert "".join(f.content for f in frames if f.type == "content_chunk").endswith(" and the end.")
            fake_anthropic.enqueue(Reply("after the restart"))
            done = await client.run_turn("hello again", timeout=30)
            assert done.stop_reason == "end_turn" and done.text == "after the restart"
    finally:
        server.close()
    await asyncio.sleep(0)


def test_scripted_approval_answers_as_the_flag_says(server, fake_anthropic):
    """`--require-approval` asks the server to wait; `--approve yes|no` answers for scripts,
    and with no terminal to ask on (stdin piped) a request is declined."""
    for flag, runs in (("yes", True), ("no", False), ("ask", False)):
        fake_anthropic.enqueue(Reply([ToolUse("web_search", {"query": "approval"})]), Reply(f"Done ({flag})."))
        result = run_client(server, "--message", "search it", "--require-approval", "web_search",
                            "--approve", flag, "--json", stdin="")
        assert result.returncode == 0, result.stderr
        frames = [json.loads(line) for line in result.stdout.splitlines()]
        kinds = [f["type"] for f in frames]
        assert kinds.index("tool_start") < kinds.index("approval_request") < kinds.index("tool_end")
        end = next(f for f in frames if f["type"] == "tool_end")
        assert end["isError"] is not runs, end
        if not runs:
            sent = [b for m in fake_anthropic.last_main.body["messages"] if isinstance(m["content"], list)
                    for b in m["content"] if b.get("type") == "tool_result"][-1]
            assert sent["is_error"] and ("--approve" in str(sent["content"]))


def test_review_verdicts_print_and_a_scripted_question_is_accepted(server, fake_anthropic):
    """`--review ask`: the verdict is a line, and with no terminal to ask on the client accepts."""
    from tests.fakes.anthropic_fake import Verdict

    fake_anthropic.verdicts(Verdict(False, 0.3, "No conclusion.", ["Add one"]))
    fake_anthropic.enqueue(Reply([ToolUse("generate_artifact", {"title": "T", "type": "text", "content": "x"})]),
                           Reply("Drafted."))
    result = run_client(server, "--message", "write it", "--review", "ask", stdin="")
    fake_anthropic.drop_queue()
    assert result.returncode == 0, result.stderr
    assert "✗ review failed 30% (version 1): No conclusion." in result.stderr and "- Add one" in result.stderr
    assert "review: accept" in result.stderr


def test_regenerate_edit_and_branches_in_an_interactive_session(server, fake_anthropic):
    """PROTOCOL 1.2 trees from the terminal: /regenerate, /edit TEXT, /branches and a switch."""
    fake_anthropic.enqueue(Reply("the first answer"), Reply("the second answer"), Reply("the edited answer"))
    result = run_client(server, stdin="what is it?\n/regenerate\n/edit what is it, really?\n/branches\n/id\n/quit\n")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "the first answer" in out and "the second answer" in out and "the edited answer" in out
    assert fake_anthropic.last_main.body["messages"][-1]["content"][-1]["text"] == "what is it, really?"
    assert len(fake_anthropic.last_main.body["messages"]) == 1  # the edited first message alone
    assert "2 versions" in out and "what is it, really?" in out
    conversation_id = out.strip().splitlines()[-1].strip()
    status, tree = server.get(f"/api/conversations/{conversation_id}/tree")
    first_user = next(m["id"] for m in tree["messages"] if m["preview"] == "what is it?")
    result = run_client(server, "--conversation", conversation_id, stdin=f"/branches {first_user}\n/quit\n")
    assert result.returncode == 0, result.stderr
    assert "the second answer" in result.stdout  # the newest reply of that branch
    assert server.get(f"/api/conversations/{conversation_id}/tree")[1]["leafId"] != tree["leafId"]


DRAFT = {"title": "Tea", "type": "text", "content": "# Tea\n\nBoil the water, then let it cool a little.\n"}


def test_scripted_parts_are_a_blank_line_apart_and_artifact_prints_the_version(server, fake_anthropic):
    """`-m` writes the reply as the page shows it (text, a tool card, text: a blank line
    between the texts), and `--artifact` the artifact's whole current version after it."""
    fake_anthropic.enqueue(Reply([Text("Drafting it first."), ToolUse("generate_artifact", DRAFT)]),
                           Reply("I found 3 things."))
    result = run_client(server, "--message", "write about tea", "--artifact")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Drafting it first.\n\nI found 3 things.\n\n" + DRAFT["content"]
    assert "▣ Tea v1/1 (text)" in result.stderr and "generate_artifact" in result.stderr
    fake_anthropic.enqueue(Reply("No artifact here."))
    none = run_client(server, "--message", "hello", "--artifact")
    assert none.returncode == 0 and none.stdout == "No artifact here.\n" and "no artifact" in none.stderr
    fake_anthropic.enqueue(Reply([ToolUse("generate_artifact", DRAFT)]), Reply("Done."))
    framed = run_client(server, "--message", "write", "--artifact", "--json")
    assert framed.returncode == 0, framed.stderr
    state = json.loads(framed.stdout.splitlines()[-1])  # after the frames, the artifact as the client holds it
    assert state["currentIndex"] == 1 and state["current"]["content"] == DRAFT["content"]
    alone = run_client(server, "--artifact")
    assert alone.returncode == 2 and "--artifact goes with --message" in alone.stderr


def test_the_new_commands_on_a_terminal(server, fake_anthropic):
    """A person at a terminal (a pseudo-terminal): the reply's parts, /artifact, /regenerate,
    /edit, /branches and a switch, and Ctrl-C stopping a reply, with the real server."""
    fake_anthropic.enqueue(Reply([Text("Drafting it first."), ToolUse("generate_artifact", DRAFT)]),
                           Reply("I found 3 things."), Reply("the second answer"), Reply("the edited answer"),
                           Reply("slow " * 300, chunk_size=5, delay=0.05))
    argv = [sys.executable, "-m", "chat_agent.client", "--url", server.ws_url]
    with Terminal(argv, cwd=ROOT, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "120"}) as term:
        term.expect("/help for commands")
        term.expect("you › ")
        term.line("write about tea")
        shown = term.expect("I found 3 things.")
        assert "Drafting it first.\n" in shown and "▸ generate_artifact" in shown and "✓ generate_artifact" in shown
        assert shown.endswith("\n\nI found 3 things.")  # a blank line before the next text part
        term.expect("you › ")
        term.line("/artifact")
        shown = term.expect("let it cool a little.")
        assert "▣ Tea v1/1 (text)\n# Tea\n\nBoil the water" in shown
        term.expect("you › ")
        term.line("/regenerate")
        term.expect("the second answer")
        term.expect("you › ")
        term.line("/edit write about coffee")
        term.expect("the edited answer")
        term.expect("you › ")
        term.line("/branches")
        shown = term.expect("switch with /branches ID")
        assert "2 versions" in shown and "write about coffee" in shown and "write about tea" in shown
        first = next(line.split()[1] for line in shown.splitlines() if line.endswith("write about tea"))
        term.expect("you › ")
        term.line("/branches msg_nope")
        shown = term.expect("you › ")
        assert "✗ error [not_found]" in shown and "answer" not in shown  # the error alone, no messages
        term.line(f"/branches {first}")
        term.expect("the second answer")  # the newest reply on that branch
        term.expect("you › ")
        term.line("/artifact")  # the artifact is the conversation's, whichever branch
        term.expect("▣ Tea v1/1 (text)")
        term.expect("you › ")
        term.line("go slowly")
        term.expect("slow slow")
        term.type("\x03")  # Ctrl-C, typed: the terminal sends SIGINT
        term.expect("⏹ aborted")
        term.expect("you › ")
        term.line("/quit")
        assert term.wait() == 0
