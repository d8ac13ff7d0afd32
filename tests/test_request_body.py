"""Request bodies built from the history's kept messages (each encoded once) are exactly the
JSON of the request's parameters, through every way the ConversationManager changes its
history, for both providers' shapes."""

from __future__ import annotations

import copy
import json
import pickle

import pytest

from chat_agent.context.conversation import PIECES, ConversationManager
from chat_agent.context.prompting import with_breakpoint
from chat_agent.context.tokens import TokenCounter
from chat_agent.model.openai_messages import chat_body, chat_params
from chat_agent.model.types import KeptMessage, ModelRequest
from chat_agent.protocol import Usage
from chat_agent.store import CreateConversation

TOOLS = [{"name": "search", "description": "Searches.", "input_schema": {"type": "object"}}]
SYSTEM = [{"type": "text", "text": "You help.", "cache_control": {"type": "ephemeral"}}]


def _result(source: str, text: str) -> dict:
    return {"type": "search_result", "source": source, "title": source.upper(), "content": [{"type": "text",
                                                                                              "text": text}]}


def _request(messages: list[dict], **kwargs) -> ModelRequest:
    return ModelRequest(model="m", messages=messages, max_tokens=100, system=SYSTEM, tools=TOOLS, **kwargs)


def _same(request: ModelRequest) -> None:
    """Twice each (the second from what the kept messages made the first time)."""
    for _ in range(2):
        assert json.loads(request.body(stream=True)) == {**request.params(), "stream": True}
        assert json.loads(chat_body(request, stream=True)) == {**chat_params(request), "stream": True}


def _same_as_a_turn_sends(conv: ConversationManager) -> None:
    """The request a turn makes (agent/loop.py): the last message with its breakpoint, the
    ones before it as the conversation keeps their JSON (`encoded`, extended call to call)."""
    history = conv.messages
    encoded = conv.encoded(len(history) - 1) if len(history) > 1 else None
    _same(_request(with_breakpoint(history), encoded=encoded))


@pytest.fixture
async def conv(db):
    store, writer = db
    writer.submit([CreateConversation("u", "c", 1.0)])
    return ConversationManager("u", "c", model=[], counter=TokenCounter(), writer=writer, store=store,
                               summary_chars=2_000, max_tokens=200_000)


async def test_bodies_follow_every_change_of_the_history(conv):
    conv.add_user("first é \"quoted\" \u2028")
    _same(_request(conv.messages))
    _same_as_a_turn_sends(conv)
    conv.add_assistant([{"type": "text", "text": "looking"},
                        {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "ü"}}],
                       Usage(input_tokens=50, output_tokens=5))
    _same(_request(conv.messages))
    _same_as_a_turn_sends(conv)
    conv.add_tool_results([{"type": "tool_result", "tool_use_id": "t1",
                            "content": [_result("https://a", "alpha"), _result("https://b", "beta")]}],
                          note="[stopped]")
    _same(_request(conv.messages))
    _same_as_a_turn_sends(conv)
    conv.add_user("second")  # merged into the user message that holds the results
    assert [b["type"] for b in conv.messages[-1]["content"]] == ["tool_result", "text", "text"]
    _same(_request(conv.messages))
    _same_as_a_turn_sends(conv)
    conv.add_assistant([{"type": "text", "text": "one"}])
    conv.add_assistant([{"type": "text", "text": "two"}])  # a paused reply goes on: merged
    _same(_request(conv.messages, tool_choice={"type": "tool", "name": "search"}, thinking_budget=10))
    _same_as_a_turn_sends(conv)
    conv.add_user([{"type": "tool_result", "tool_use_id": "t9", "content": [_result("https://b", "again")]},
                   {"type": "text", "text": "third"}])
    _same(_request(conv.messages))
    _same_as_a_turn_sends(conv)
    assert conv.forget_exchange()
    _same(_request(conv.messages))
    _same_as_a_turn_sends(conv)
    conv.add_user("x" * 3_000)

    async def summarizer(transcript: str) -> str:
        return "the summary"

    assert await conv.summarize(summarizer)
    _same(_request(conv.messages))
    _same_as_a_turn_sends(conv)
    conv.clear()
    conv.add_user("after the clear")
    _same(_request(conv.messages))
    _same_as_a_turn_sends(conv)


async def test_bodies_stay_exact_over_many_turns(db):
    """A long conversation's calls, each extending the kept JSON by a piece; past PIECES of
    them the pieces are joined into one, and a body built earlier is not changed by that."""
    store, writer = db
    writer.submit([CreateConversation("u", "long", 1.0)])
    conv = ConversationManager("u", "long", model=[], counter=TokenCounter(), writer=writer, store=store,
                               summary_chars=10_000_000, max_tokens=10_000_000)
    early = None
    for n in range(3 * PIECES):
        conv.add_user(f"question {n}")
        _same_as_a_turn_sends(conv)
        if n == 5:
            history = conv.messages
            early = _request(with_breakpoint(history), encoded=conv.encoded(len(history) - 1))
            sent = early.body(stream=True)
        conv.add_assistant([{"type": "text", "text": f"answer {n} ✓"}])
        _same_as_a_turn_sends(conv)
    assert early is not None and early.body(stream=True) == sent
    assert len(conv.encoded(len(conv.messages) - 1)[1]) <= PIECES


async def test_a_history_read_back_sends_what_was_kept(conv, db):
    conv.add_user("hello")
    conv.add_assistant([{"type": "text", "text": "hi"}])
    sent = conv.messages[-1]
    assert isinstance(sent, KeptMessage)
    await db[1].flush()
    again = ConversationManager("u", "c", counter=TokenCounter(), writer=db[1], store=db[0], summary_chars=2_000,
                                max_tokens=200_000)
    await again.load()
    assert all(isinstance(m, KeptMessage) for m in again.messages)
    assert again.messages == conv.messages
    assert again.messages[-1]["content"] is again._held[-1].data["content"]  # one message, not a copy
    _same(_request(again.messages))
    _same_as_a_turn_sends(again)


def test_a_kept_message_is_never_changed_in_place():
    message = KeptMessage({"role": "user", "content": "hi"})
    assert message.made("json", lambda m: b"x") == b"x" and message.made("json", lambda m: b"y") == b"x"
    for change in (lambda: message.__setitem__("role", "assistant"), lambda: message.pop("role"),
                   lambda: message.update(role="assistant"), message.clear, lambda: message.setdefault("x", 1),
                   lambda: message.__delitem__("role"), message.popitem):
        with pytest.raises(TypeError, match="never changed in place"):
            change()
    assert message == {"role": "user", "content": "hi"}
    for other in (copy.copy(message), copy.deepcopy(message), pickle.loads(pickle.dumps(message))):
        assert type(other) is KeptMessage and other == message
    changed = {**message, "role": "assistant"}  # what a request does to the last one (a breakpoint)
    assert type(changed) is dict and changed["role"] == "assistant"
