"""`python -m chat_agent.client`: an interactive chat on a terminal, or one scripted turn.

Exit codes: 0 the turn ended normally (end_turn, max_tokens, max_steps) or the user left;
1 an `error` frame, or a turn that ended error/aborted/refusal, or a server frame that does
not parse; 2 the connection could not be opened, was refused, or was lost for good;
130 Ctrl-C twice (quit without waiting for the abort to finish).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from chat_agent.protocol import (AnyServerFrame, ApprovalRequest, ContextCleared, ContextUpdate, Done, ErrorFrame,
                                 ReviewRequest, HistoryFrame)

from .connection import DEFAULT_URL, ChatClient
from .console import LineReader, Output, SigintRouter
from .errors import ChatError, ClientError, ConnectError, ConnectionLost
from .branches import last_user_message, render_branches
from .history import HistoryError, conversation_tree, list_conversations, newest_messages, older_messages
from .render import Out, Style, TurnRenderer, artifact_text, banner, frame_json, render_history, render_messages
from .uploads import UploadError, upload

EXIT_OK, EXIT_FAILED, EXIT_CONNECTION, EXIT_INTERRUPTED = 0, 1, 2, 130
OK_STOPS = frozenset({"end_turn", "max_tokens", "max_steps"})
HELP = """commands:
  /attach PATH  upload a file (image, PDF, DOCX, TXT, MD, CSV) and attach it to your next message
  /artifact  print the artifact's current version (its whole text)
  /clear   empty this conversation's history (the artifact and memories stay)
  /id      print the conversation id
  /more    show the messages before those shown (a long conversation opens with its newest)
  /regenerate  answer your last message again (the old reply stays, as another branch)
  /edit TEXT   resend your last message as TEXT (a new branch from there)
  /branches [ID]  list the other versions of this conversation's messages; with ID, switch to it
  /help    this list
  /quit    leave (also Ctrl-D, or Ctrl-C at the prompt)
Ctrl-C during a reply stops it; press it again to quit at once."""


def exit_code(done: Done | None, error: ErrorFrame | None) -> int:
    if error is not None or done is None or done.stop_reason not in OK_STOPS:
        return EXIT_FAILED
    return EXIT_OK


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chat-agent-client", description="Chat with a chat-agent server.")
    parser.add_argument("--url", default=env.get("CHAT_AGENT_URL") or DEFAULT_URL,
                        help="WebSocket URL (env CHAT_AGENT_URL; default %(default)s)")
    parser.add_argument("--token", default=env.get("CHAT_AGENT_TOKEN") or None,
                        help="credential when the server has auth on (env CHAT_AGENT_TOKEN)")
    parser.add_argument("--conversation", metavar="ID", help="continue this conversation")
    parser.add_argument("--list", action="store_true", help="list your conversations, most recent first, and exit")
    parser.add_argument("--message", "-m", help="send one message, print the reply, exit")
    parser.add_argument("--artifact", action="store_true",
                        help="with --message: print the artifact's current version after the reply")
    parser.add_argument("--json", action="store_true", help="print every frame as a JSON line")
    parser.add_argument("--thinking", action="store_true", help="ask for extended thinking")
    parser.add_argument("--no-web-search", action="store_true", help="do not offer web search")
    parser.add_argument("--model", help="a model the server allows")
    parser.add_argument("--attach", action="append", default=[], metavar="PATH",
                        help="upload a file and attach it to the message (repeatable)")
    parser.add_argument("--research", action="store_true", help="offer deep research to the model")
    parser.add_argument("--knowledge", action="append", default=[], metavar="COLLECTION",
                        help="let the model search this knowledge collection (its id; repeatable); the reply lists "
                             "the sources it cites")
    parser.add_argument("--require-approval", action="append", default=[], metavar="TOOL",
                        help="ask before this tool runs ('*': every tool), besides the server's own list (repeatable)")
    parser.add_argument("--review", choices=("auto", "ask", "off"),
                        help="have a reviewer model judge what the turn makes: revise a failed result at once "
                             "(auto), ask first (ask), or not (off); default: the server's")
    parser.add_argument("--max-revisions", type=int, choices=range(4), default=1, metavar="N",
                        help="revisions after failed reviews, 0-3 (default 1)")
    parser.add_argument("--approve", choices=("ask", "yes", "no"), default="ask",
                        help="answer tool approval requests: ask on the terminal (default; declined when there is "
                             "no terminal), or approve / decline every one without asking (for scripts)")
    return parser


def settings_from(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {"webSearch": not args.no_web_search, "thinking": args.thinking}
    if args.research:
        settings["enableDeepResearch"] = True
    if args.model:
        settings["model"] = args.model
    if args.require_approval:
        settings["requireApproval"] = args.require_approval
    if args.review == "off":
        settings["review"] = {"enabled": False}
    elif args.review:
        settings["review"] = {"enabled": True, "maxRevisions": args.max_revisions, "decision": args.review}
    if args.knowledge:
        settings["knowledge"] = args.knowledge
    return settings


@dataclass
class Ui:
    """What the modes share: where output goes and how frames are shown."""

    out: Output
    renderer: TurnRenderer
    json: bool
    sigint: SigintRouter = field(default_factory=SigintRouter)
    more_before: str | None = None  # the oldest message shown, when older ones exist (`/more`)
    approve: str = "ask"  # how approval requests are answered (`--approve`)
    reader: LineReader = field(default_factory=LineReader)  # the terminal's lines, one reader for all

    def show(self, frame: AnyServerFrame) -> None:
        if self.json:
            self.out.reply.write(frame_json(frame) + "\n")
            self.out.reply.flush()
        else:
            self.out.write(self.renderer.render(frame))

    def note(self, text: str) -> None:
        if self.json:  # stdout is frames only; the note still deserves a reader
            print(text, file=sys.stderr, flush=True)
        else:
            self.out.write(self.renderer.note(text))


def make_ui(args: argparse.Namespace, env: Mapping[str, str]) -> Ui:
    # Scripted: the reply alone on stdout, decoration on stderr. Interactive: all on stdout.
    info = sys.stderr if args.message is not None else sys.stdout
    renderer = TurnRenderer(Style.for_stream(info, env), live=info.isatty())
    return Ui(Output(sys.stdout, info), renderer, args.json, approve=args.approve)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    parser = build_parser(env)
    args = parser.parse_args(argv)
    if args.artifact and args.message is None:
        parser.error("--artifact goes with --message (in a session, type /artifact)")
    for stream in (sys.stdout, sys.stderr):  # a non-UTF-8 terminal gets '?' for the box glyphs
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    try:
        return asyncio.run(run(args, make_ui(args, env)))
    except KeyboardInterrupt:  # only where SigintRouter could not take over (Windows)
        return EXIT_INTERRUPTED


async def run(args: argparse.Namespace, ui: Ui) -> int:
    if args.list:
        return await list_all(args, ui)
    client = ChatClient(args.url, args.token, args.conversation, reconnect=True, on_status=ui.note)
    try:
        await client.connect()
        with ui.sigint:
            if args.message is not None:
                return await scripted(client, args, ui)
            return await interactive(client, args, ui)
    except (ConnectError, ConnectionLost) as exc:
        print(f"chat-agent-client: {exc}", file=sys.stderr)
        return EXIT_CONNECTION
    except ClientError as exc:  # ProtocolMismatch: a bug, say so plainly
        print(f"chat-agent-client: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        await client.close()


async def list_all(args: argparse.Namespace, ui: Ui) -> int:
    """`--list`: one line per conversation (id, last activity, title), every page of them."""
    try:
        conversations = await list_conversations(args.url, args.token)
    except HistoryError as exc:
        print(f"chat-agent-client: {exc}", file=sys.stderr)
        return EXIT_CONNECTION
    for conversation in conversations:
        if ui.json:
            ui.out.reply.write(json.dumps(conversation) + "\n")
        else:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(conversation["updatedAt"]))
            ui.out.reply.write(f"{conversation['id']}  {when}  {conversation['title'] or '(untitled)'}\n")
    ui.out.reply.flush()
    return EXIT_OK


async def scripted(client: ChatClient, args: argparse.Namespace, ui: Ui) -> int:
    if args.json and client.session is not None:
        ui.show(client.session)
    try:
        attachments = [await upload(args.url, args.token, path) for path in args.attach]
    except UploadError as exc:
        print(f"chat-agent-client: {exc}", file=sys.stderr)
        return EXIT_FAILED
    code = await one_turn(client, args.message, settings_from(args), ui, attachments)
    if args.artifact and code != EXIT_INTERRUPTED:
        if not ui.json and client.artifact is not None:
            ui.out.write([Out("\n", reply=True)])  # a blank line between the reply and the artifact
        show_artifact(client, ui)
    return code


def show_artifact(client: ChatClient, ui: Ui) -> None:
    """The artifact's current version as the client holds it (kept up to date by the frames)."""
    if ui.json:
        artifact = client.artifact
        ui.out.reply.write((artifact.model_dump_json(by_alias=True) if artifact else "null") + "\n")
        ui.out.reply.flush()
    else:
        ui.out.write(artifact_text(client.artifact, ui.renderer.style))


async def one_turn(client: ChatClient, text: str, settings: dict[str, Any], ui: Ui,
                   attachments: list[dict[str, Any]] | None = None, *, edit_of: str | None = None,
                   regenerate: bool = False) -> int:
    """Run a turn (a message, a message that edits `edit_of`, or with `regenerate` another reply
    to the last message); the first Ctrl-C sends `abort`, a second one stops waiting."""
    async def on_frame(frame: AnyServerFrame) -> None:
        ui.show(frame)
        if isinstance(frame, ApprovalRequest):
            await answer_approval(client, frame, ui)
        elif isinstance(frame, ReviewRequest):
            await answer_review(client, frame, ui)

    turn = asyncio.create_task(
        client.run_regenerate(settings=settings, on_frame=on_frame) if regenerate
        else client.run_turn(text, settings, on_frame=on_frame, attachments=attachments or None, edit_of=edit_of))
    aborts: list[asyncio.Task[None]] = []

    def on_sigint() -> None:
        if aborts:
            turn.cancel()
            return
        ui.note("aborting… (Ctrl-C again to quit)")
        aborts.append(asyncio.create_task(client.abort()))

    ui.sigint.handler = on_sigint
    try:
        done = await turn
    except ChatError as exc:
        return exit_code(exc.done, exc.frame)
    except asyncio.CancelledError:
        if not turn.cancelled() or _being_cancelled():
            raise
        return EXIT_INTERRUPTED
    finally:
        ui.sigint.handler = None
        await asyncio.gather(*aborts, return_exceptions=True)  # a failed abort shows in the turn
    return exit_code(done, done.error)


async def answer_approval(client: ChatClient, request: ApprovalRequest, ui: Ui) -> None:
    """Approves or declines a tool call as `--approve` says, asking on the terminal by default."""
    if ui.approve != "ask":
        approved, why = ui.approve == "yes", None if ui.approve == "yes" else "Declined by the client (--approve no)."
    elif not sys.stdin.isatty():
        approved, why = False, "Declined: the client has no terminal to ask on (run it with --approve yes)."
    else:
        shown = json.dumps(request.input, ensure_ascii=False)
        shown = shown if len(shown) <= 400 else shown[:400] + "…"
        ui.out.info.write(f"  {request.name} {shown}\n")
        ui.out.info.flush()
        line = await ui.reader.read(f"run {request.name}? [y/N] ")
        approved = (line or "").strip().lower() in ("y", "yes")
        why = None if approved else "Declined by the user."
    await client.approve(request.tool_id, approved, why)


async def answer_review(client: ChatClient, request: ReviewRequest, ui: Ui) -> None:
    """Asks on the terminal whether to revise after a failed review; accepts without one."""
    if not sys.stdin.isatty():
        await client.decide_review(request.review_id, "accept")
        return
    line = (await ui.reader.read("revise it with the feedback? [y/N] ") or "").strip().lower()
    if line not in ("y", "yes"):
        await client.decide_review(request.review_id, "accept")
        return
    note = (await ui.reader.read("a note for the revision (Enter for none): ") or "").strip()
    await client.decide_review(request.review_id, "revise", note or None)


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def interactive(client: ChatClient, args: argparse.Namespace, ui: Ui) -> int:
    tty = sys.stdin.isatty()
    session = client.session
    if session is not None and not ui.json:
        ui.more_before = session.more_before
        if args.conversation and session.messages:
            ui.out.info.write(render_history(session, ui.renderer.style) + "\n")
        if tty:
            ui.out.info.write(banner(session, ui.renderer.style) + "\n")
    reader, settings = ui.reader, settings_from(args)
    attachments: list[dict[str, Any]] = []
    prompt = ui.renderer.style.bold("you › ") if tty else ""
    while True:
        await drain(client, ui)
        ui.sigint.handler = reader.cancel
        line = await reader.read(prompt)
        ui.sigint.handler = None
        if line is None:
            if tty:
                ui.out.info.write("\n")
            return EXIT_OK
        text = line.strip()
        if text.startswith("/attach"):
            await attach(args, text, attachments, ui)
        elif text.lower() == "/more":
            await more(args, client, ui)
        elif text.lower().split()[:1] in (["/regenerate"], ["/edit"], ["/branches"]):
            if await branch_command(args, client, text, settings, ui) == EXIT_INTERRUPTED:
                return EXIT_INTERRUPTED
        elif text.startswith("/"):
            if await command(client, text, ui):
                return EXIT_OK
        elif text:
            sent, attachments = attachments, []
            if await one_turn(client, text, settings, ui, sent) == EXIT_INTERRUPTED:
                return EXIT_INTERRUPTED


async def attach(args: argparse.Namespace, text: str, attachments: list[dict[str, Any]], ui: Ui) -> None:
    path = text[len("/attach"):].strip()
    if not path:
        ui.note("usage: /attach PATH")
        return
    try:
        attachments.append(await upload(args.url, args.token, path))
    except UploadError as exc:
        ui.note(str(exc))
        return
    ui.note(f"attached {path} ({attachments[-1]['type']}); it goes with your next message")


async def more(args: argparse.Namespace, client: ChatClient, ui: Ui) -> None:
    """`/more`: the page of messages before the oldest one shown."""
    if ui.more_before is None or client.conversation_id is None:
        ui.note("no older messages")
        return
    try:
        messages, ui.more_before = await older_messages(args.url, args.token, client.conversation_id, ui.more_before)
    except HistoryError as exc:
        ui.note(str(exc))
        return
    style = ui.renderer.style
    ui.out.info.write(style.dim(f"(earlier: {len(messages)} messages)") + "\n" + render_messages(messages, style) + "\n")
    ui.out.info.write(style.dim("(older messages: /more)" if ui.more_before else "(the beginning)") + "\n")
    ui.out.info.flush()


async def branch_command(args: argparse.Namespace, client: ChatClient, text: str, settings: dict[str, Any],
                         ui: Ui) -> int:
    """`/regenerate`, `/edit TEXT`, `/branches [ID]` (PROTOCOL 1.2 trees)."""
    name, _, rest = text.partition(" ")
    name, rest = name.lower(), rest.strip()
    if name == "/regenerate":
        return await one_turn(client, "", settings, ui, regenerate=True)
    if client.conversation_id is None:
        ui.note("not connected to a conversation")
        return EXIT_OK
    try:
        if name == "/edit":
            if not rest:
                ui.note("usage: /edit TEXT (resends your last message as TEXT)")
                return EXIT_OK
            last = last_user_message(await newest_messages(args.url, args.token, client.conversation_id, 10))
            if last is None:
                ui.note("there is no message of yours to edit yet")
                return EXIT_OK
            return await one_turn(client, rest, settings, ui, edit_of=last.id)
        if rest:
            await client.switch_branch(rest)
            ended = await show_until(client, ui, lambda frame: isinstance(frame, (HistoryFrame, ErrorFrame)))
            if isinstance(ended, HistoryFrame):  # an error (no such message) is its own answer
                messages = await newest_messages(args.url, args.token, client.conversation_id, 4)
                ui.out.info.write(render_messages(messages, ui.renderer.style) + "\n")
        else:
            tree = await conversation_tree(args.url, args.token, client.conversation_id)
            ui.out.info.write(render_branches(tree, ui.renderer.style) + "\n")
    except HistoryError as exc:
        ui.note(str(exc))
    ui.out.info.flush()
    return EXIT_OK


async def drain(client: ChatClient, ui: Ui) -> None:
    """Show what arrived between turns (a late `title`) before the next prompt."""
    while True:
        try:
            frame = await client.receive(timeout=0)
        except TimeoutError:
            return
        ui.show(frame)


async def command(client: ChatClient, text: str, ui: Ui) -> bool:
    """Run a slash command; True means leave."""
    name = text.split()[0].lower()
    if name in ("/quit", "/exit"):
        return True
    if name == "/clear":
        await client.clear_context()
        await show_until(client, ui, _ends_clear())
    elif name == "/id":
        ui.out.info.write(f"{client.conversation_id}\n")
    elif name == "/artifact":
        show_artifact(client, ui)
    elif name == "/help":
        ui.out.info.write(HELP + "\n")
    else:
        ui.note(f"unknown command {name}; /help lists them")
    ui.out.info.flush()
    return False


def _ends_clear() -> Callable[[AnyServerFrame], bool]:
    """`clear_context` is answered by `context_cleared` then `context_update`."""
    cleared = False

    def ends(frame: AnyServerFrame) -> bool:
        nonlocal cleared
        cleared = cleared or isinstance(frame, ContextCleared)
        return isinstance(frame, ErrorFrame) or (cleared and isinstance(frame, ContextUpdate))

    return ends


async def show_until(client: ChatClient, ui: Ui, ends: Callable[[AnyServerFrame], bool],
                     timeout: float = 15.0) -> AnyServerFrame | None:
    """Shows frames up to the one `ends` accepts, and returns it (None: none came in time)."""
    try:
        async with asyncio.timeout(timeout):
            while not ends(frame := await client.receive()):
                ui.show(frame)
            ui.show(frame)
            return frame
    except TimeoutError:
        ui.note(f"no answer from the server after {timeout:g} s")
        return None
