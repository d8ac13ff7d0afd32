"""Reflection and titles against the fake Anthropic API; the reflect tool through the registry."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from chat_agent.config import Settings
from chat_agent.model import AnthropicClient as ModelClient, LLMError
from chat_agent.canvas.memory import MemoryBook
from chat_agent.protocol import ToolCallRecord, VisibleMessage
from chat_agent.canvas.reflection import reflect, transcript_for_reflection
from chat_agent.store import MemoriesRecord, SqliteStore
from chat_agent.canvas.titles import clean_title, make_title
from chat_agent.tooling import ToolRegistry, ToolServices
from chat_agent.store.writer import StoreWriter
from tests.fakes.anthropic_fake import Fault, Reply, ToolUse
from tools import reflect as reflect_tool

SMALL = "claude-haiku-4-5"
MEMORIES = MemoriesRecord(["Use British spelling."], ["Writes a birding newsletter."], 1.0)


@pytest.fixture
async def model(fake_anthropic):
    settings = Settings(anthropic_api_key=fake_anthropic.api_key, anthropic_base_url=fake_anthropic.base_url,
                        llm_max_retries=0)
    client = ModelClient(settings)
    yield client
    await client.close()


def forced(request, name: str) -> dict:
    """The one tool the request offered and forced; its schema checked like the API would."""
    assert request["tool_choice"] == {"type": "tool", "name": name}
    [tool] = request["tools"]
    assert tool["name"] == name
    Draft202012Validator.check_schema(tool["input_schema"])
    return tool["input_schema"]


async def run_reflect(model, **kw):
    args = {"memories": MEMORIES, "transcript": "USER: hi", "artifact": "# Owls\nOwls are…"} | kw
    return await reflect(model, model_name=SMALL, **args)


async def test_reflect_forces_its_tool_on_the_small_model(model, fake_anthropic):
    fake_anthropic.enqueue(Reply([ToolUse("store_reflections", {
        "styleRules": ["Use British spelling.", " use british  spelling. ", "Keep paragraphs short."],
        "content": ["Writes a birding newsletter.", 7, ""]})]))
    result = await run_reflect(model, transcript="USER: make it shorter, I always want short paragraphs")
    request = fake_anthropic.requests[-1]
    assert request["model"] == SMALL
    schema = forced(request, "store_reflections")
    assert schema["properties"]["styleRules"] == {"type": "array", "items": {"type": "string"},
                                                  "description": schema["properties"]["styleRules"]["description"]}
    prompt = request["messages"][0]["content"]
    for shown in ("Use British spelling.", "Writes a birding newsletter.", "# Owls", "short paragraphs"):
        assert shown in prompt
    # cleaned: duplicates merged (latest wording), a non-string and an empty dropped
    assert result == (["use british spelling.", "Keep paragraphs short."], ["Writes a birding newsletter."])


async def test_reflect_shortens_and_caps(model, fake_anthropic):
    long_item = "word " * 200
    fake_anthropic.enqueue(Reply([ToolUse("store_reflections", {
        "styleRules": [long_item], "content": [f"fact {i}" for i in range(50)]})]))
    rules, facts = await run_reflect(model, artifact=None)
    assert len(rules[0]) <= 400 and rules[0].endswith("…") and rules[0].startswith("word word")
    assert facts == [f"fact {i}" for i in range(10, 50)]  # the newest 40
    assert "<artifact>(none)</artifact>" in fake_anthropic.requests[-1]["messages"][0]["content"]


@pytest.mark.parametrize("reply", [
    Reply("The user likes owls."),  # no tool call
    Reply([ToolUse("store_reflections", {"styleRules": "short", "content": []})]),  # not a list
    Reply([ToolUse("store_reflections", {"styleRules": [], "content": ["  "]})]),  # would wipe the memory
    Reply([ToolUse("store_reflections", {"styleRules": ["a"], "content": ["b"]})], stop_reason="max_tokens"),
])
async def test_reflect_unusable_replies_give_none(model, fake_anthropic, reply):
    fake_anthropic.enqueue(reply)
    assert await run_reflect(model) is None


async def test_model_errors_propagate(model, fake_anthropic):
    fake_anthropic.enqueue(Fault.status(500), Fault.status(529))
    with pytest.raises(LLMError):
        await run_reflect(model)
    with pytest.raises(LLMError):
        await make_title(model, model_name=SMALL, user_text="hi", reply_text="hello")


def message(role: str, content: str, **kw) -> VisibleMessage:
    return VisibleMessage(id=content[:8], role=role, content=content, created_at=0.0, **kw)


def test_transcript_keeps_the_newest_messages():
    messages = [message("user", "old " * 100), message("assistant", "", tool_calls=[
        ToolCallRecord(tool_id="t", name="generate_artifact")]), message("user", "newest question")]
    full = transcript_for_reflection(messages)
    assert full.startswith("USER: old") and "ASSISTANT: [used tools: generate_artifact]" in full
    short = transcript_for_reflection(messages, limit_chars=260)
    assert len(short) <= 260 and short.endswith("USER: newest question")
    assert short.startswith("[… earlier messages omitted …]\n\nUSER: […] old")
    tiny = transcript_for_reflection(messages, limit_chars=80)
    assert tiny.startswith("[… earlier messages omitted …]") and "old" not in tiny


async def test_title_is_cleaned(model, fake_anthropic):
    fake_anthropic.enqueue(Reply([ToolUse("set_title", {"title": '"Birding Newsletter\nIdeas."'})]))
    title = await make_title(model, model_name=SMALL, user_text="x" * 5000, reply_text="Sure!")
    assert title == "Birding Newsletter Ideas"
    request = fake_anthropic.requests[-1]
    assert request["model"] == SMALL and request["max_tokens"] <= 200
    assert forced(request, "set_title")["required"] == ["title"]
    assert len(request["messages"][0]["content"]) < 3000  # a long message is clipped


async def test_title_garbage_gives_none(model, fake_anthropic):
    fake_anthropic.enqueue(Reply("Owls"), Reply([ToolUse("set_title", {"title": 3})]),
                           Reply([ToolUse("set_title", {"title": " ''. "})]))
    for _ in range(3):
        assert await make_title(model, model_name=SMALL, user_text="owls?", reply_text="Owls!") is None


@pytest.mark.parametrize("raw, expected", [
    ("Title: **Owl Migration Patterns**", "Owl Migration Patterns"),
    ("Planning a Trip to the Alps This Summer", "Planning a Trip"),
    ("Rust Error Handling, Explained Simply Today!", "Rust Error Handling, Explained Simply"),
    ("Learning C#", "Learning C#"),
    ("# Kubernetes", "Kubernetes"),
    ("「量子计算入门」", "量子计算入门"),
    ("Untitled", None), ("New chat.", None), ("Hi", None), ("", None), ("?!", None),
])
def test_clean_title(raw, expected):
    assert clean_title(raw) == expected


def test_clean_title_caps_characters():
    title = clean_title("Internationalization Considerations Regarding Multilingual Documentation Pipelines")
    assert title is not None and len(title) <= 60 and not title.endswith(" ")


async def test_reflect_tool_through_the_registry(tmp_path):
    store = SqliteStore(tmp_path / "db.sqlite")
    await store.open()
    writer = StoreWriter(store)
    writer.start()
    try:
        book = MemoryBook(store, writer)
        await book.add("alice", ["Use British spelling."], [])
        registry = ToolRegistry()
        registry.add(reflect_tool.build(Settings()))
        alice = book.for_user("alice", await book.load("alice"))  # as a turn reads them at its start

        async def run(tool_input: dict, memory=alice):
            return await registry.run("toolu_1", "reflect", tool_input, conversation_id="c", owner="alice",
                                      on_progress=lambda *a: None, services=ToolServices(memory=memory))

        result = await run({"styleRules": ["use british  spelling."], "facts": ["Teaches chemistry."]})
        assert not result.is_error
        assert result.output == {"styleRules": ["use british spelling."], "content": ["Teaches chemistry."]}
        assert "Saved: Teaches chemistry." in result.content and "1 item was already remembered" in result.content
        await writer.flush()
        stored = await store.get_memories("alice")
        assert stored is not None and stored.content == ["Teaches chemistry."]

        empty = await run({"styleRules": [" "]})
        assert empty.is_error and "at least one" in empty.content
        too_long = await run({"facts": ["x" * 401]})
        assert too_long.is_error and "facts.0" in too_long.content
        missing = await run({"facts": ["y"]}, memory=None)
        assert missing.is_error and "RuntimeError" in missing.content
    finally:
        await writer.close()
        await store.close()
