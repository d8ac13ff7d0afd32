"""The ConversationManager on a real SQLite store: counting, correcting, persisting, summarizing."""

from __future__ import annotations

import pytest

from chat_agent.context.conversation import ConversationManager
from chat_agent.protocol import Usage as TokenUsage
from chat_agent.protocol import VisibleMessage
from chat_agent.store import CreateConversation
from chat_agent.context.tokens import TokenCounter


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


@pytest.fixture
async def store(db):
    db[1].submit([CreateConversation("u", "c", 1.0)])
    return db


def manager(store, counter, summary_chars=300_000, model=(), **kwargs) -> ConversationManager:
    return ConversationManager("u", "c", model=model, counter=counter, writer=store[1], store=store[0],
                               summary_chars=summary_chars, max_tokens=200_000, **kwargs)


async def test_counts_are_incremental_and_corrected_by_usage(store, counter):
    conv = manager(store, counter)
    conv.add_user("hello there")
    estimate = conv.tokens
    assert 0 < estimate < 20
    # the API says the request cost 500 tokens (system prompt, tools...) and the reply 40
    conv.add_assistant([{"type": "text", "text": "hi"}], TokenUsage(input_tokens=300, cache_read_tokens=200,
                                                                   output_tokens=40))
    assert conv.tokens == 540
    conv.add_user("and more")
    assert conv.tokens == 540 + counter.content([{"type": "text", "text": "and more"}])


async def test_user_messages_merge_to_keep_roles_alternating(store, counter):
    conv = manager(store, counter)
    conv.add_user("one")
    conv.add_assistant([{"type": "tool_use", "id": "t", "name": "x", "input": {}}])
    conv.add_tool_results([{"type": "tool_result", "tool_use_id": "t", "content": "r"}], note="[stopped]")
    conv.add_user("two")
    assert [m["role"] for m in conv.messages] == ["user", "assistant", "user"]
    assert [b["type"] for b in conv.messages[-1]["content"]] == ["tool_result", "text", "text"]


async def test_both_histories_persist(store, counter):
    conv = manager(store, counter)
    conv.add_visible(VisibleMessage(id="m1", role="user", content="hi", created_at=1.0))
    conv.add_user("hi")
    conv.add_assistant([{"type": "text", "text": "yo"}], TokenUsage(input_tokens=10, output_tokens=2))
    await store[1].flush()
    visible = await store[0].load_history("u", "c", "visible")
    assert [item.data["content"] for item in visible] == ["hi"]
    # Opened again, a conversation holds only the size of its model-facing history...
    again = manager(store, counter, model=None, size=await store[0].history_size("u", "c", "model"))
    assert not again.loaded and again.tokens - again._overhead == conv.tokens - conv._overhead
    assert again.chars == conv.chars and again.needs_summary() is False
    # ...and reads it when a turn needs it
    await again.load()
    assert again.messages == conv.messages and again.tokens - again._overhead == conv.tokens - conv._overhead


async def test_an_idle_conversation_lets_its_history_go_and_reads_it_back(store, counter):
    conv = manager(store, counter, model=None)
    await conv.load()
    conv.add_user("question " + "x" * 300)
    conv.add_assistant([{"type": "text", "text": "answer"}], TokenUsage(input_tokens=120, output_tokens=7))
    tokens, chars, messages = conv.tokens, conv.chars, list(conv.messages)
    conv.release()
    assert not conv.loaded and (conv.tokens, conv.chars) == (tokens, chars)
    with pytest.raises(RuntimeError):
        conv.add_user("not while idle")
    await conv.load()  # the writer may still hold the writes: load waits for them
    assert conv.messages == messages and (conv.tokens, conv.chars) == (tokens, chars)
    conv.add_user("next turn")  # merges nothing: the reply was last
    assert [m["role"] for m in conv.messages] == ["user", "assistant", "user"]
    conv.release()
    conv.clear()  # needs no history in hand
    assert conv.tokens == 0 and conv.messages == []
    await store[1].flush()
    assert await store[0].load_history("u", "c", "model") == []
    assert await store[0].load_history("u", "c", "visible") == []


async def test_summary_replaces_the_old_part_only(store, counter):
    conv = manager(store, counter, summary_chars=2_000)
    for i in range(6):
        conv.add_user(f"question {i} " + "x" * 400)
        conv.add_assistant([{"type": "text", "text": f"answer {i} " + "y" * 400}])
    assert conv.needs_summary()
    transcripts = []

    async def summarize(transcript: str) -> str:
        transcripts.append(transcript)
        return "They asked six questions."

    assert await conv.summarize(summarize)
    assert not conv.needs_summary()
    assert "question 0" in transcripts[0]
    first = conv.messages[0]
    assert first["role"] == "user" and "They asked six questions." in first["content"][0]["text"]
    assert conv.messages[-1]["content"][0]["text"].startswith("answer 5")
    roles = [m["role"] for m in conv.messages]
    assert all(a != b for a, b in zip(roles, roles[1:]))
    await store[1].flush()
    stored = await store[0].load_history("u", "c", "model")
    assert [item.data for item in stored] == conv.messages


async def test_a_bad_operation_spares_other_conversations(store, counter):
    from chat_agent.store import AppendEvents, CreateConversation, EventRecord
    st, writer = store
    writer.submit([CreateConversation("u", "other", 1.0)])
    await writer.flush()
    event = EventRecord(conversation_id="c", seq=1, type="pong", turn_id=None, frame="{}")
    writer.submit([AppendEvents("u", "c", (event,))])
    await writer.flush()
    # a repeated seq in "c" (a bug) must not take "other"'s events down with it
    good = EventRecord(conversation_id="other", seq=1, type="pong", turn_id=None, frame="{}")
    writer.submit([AppendEvents("u", "c", (event,)), AppendEvents("u", "other", (good,))])
    await writer.flush()
    assert [e.seq for e in await st.events_after("u", "other", 0)] == [1]
    assert [e.seq for e in await st.events_after("u", "c", 0)] == [1]


def test_an_image_costs_what_its_size_says():
    from chat_agent.files.images import image_block, prepare_image
    from chat_agent.context.tokens import IMAGE_TOKENS, TokenCounter
    from tests.samples import make_png

    counter = TokenCounter()
    small = image_block(prepare_image(make_png(150, 100)))
    full = image_block(prepare_image(make_png(1568, 1000)))
    assert counter.block(small) == 150 * 100 // 750 + 4  # + the block overhead
    assert counter.block(full) == IMAGE_TOKENS + 4  # capped at what a full-size image costs
    assert counter.block({"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}) == IMAGE_TOKENS + 4
    assert counter.block({"type": "image", "source": {"type": "base64", "data": "!!"}}) == IMAGE_TOKENS + 4


async def test_a_conversation_past_its_summaries_reads_back_as_held(store, counter):
    """Turns on a path of messages (each item belongs to its message), summarized as they go:
    after each, what the store gives back (read from the path's newest summary on) is the
    history in hand. The first two messages have no items (a conversation imported): read as
    their text until a summary stands for them, never again after it."""
    conv = manager(store, counter, summary_chars=3_000, model=None)
    conv.add_visible(VisibleMessage(id="u0", role="user", content="imported question " + "i" * 300, created_at=1.0))
    conv.add_visible(VisibleMessage(id="a0", role="assistant", content="imported answer " + "j" * 300, created_at=1.0))
    await store[1].flush()

    async def summarize(transcript: str) -> str:
        return f"Summary of {len(transcript)} characters."

    summaries = 0
    for n in range(1, 13):
        await conv.load()
        conv.add_visible(VisibleMessage(id=f"u{n}", role="user", content=f"question {n}", created_at=1.0))
        if conv.needs_summary(400):
            summaries += await conv.summarize(summarize)
        conv.add_user(f"question {n} " + "x" * 400)
        conv.begin_reply(f"a{n}")
        conv.add_assistant([{"type": "text", "text": f"answer {n} " + "y" * 400}])
        conv.replace_visible(VisibleMessage(id=f"a{n}", role="assistant", content=f"answer {n}", created_at=1.0,
                                            parent_id=f"u{n}"))
        held, chars = list(conv.messages), conv.chars
        conv.release()
        await store[1].flush()
        stored = await store[0].load_history("u", "c", "model")
        assert [item.data for item in stored] == held, n
        assert (await store[0].history_size("u", "c", "model")).chars == chars
    assert summaries >= 2
    assert not any("imported" in str(item.data) for item in stored)
