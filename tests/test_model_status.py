"""A silent or failing model, as the loop tells it (PROTOCOL 1.2 "Live status"): the ReAct loop
in-process on the real model clients against the fake APIs (real HTTP on loopback). While a
call has sent nothing the loop yields `ModelWaiting` at a steady pace; each retry of a call
is a `ModelRetrying` with its attempt; a call silent for the idle bound ends with an
`llm_error`. Intervals are small here and checked with generous bounds."""

from __future__ import annotations

import asyncio
import time
from contextlib import aclosing
from typing import Any, Iterator

import pytest

from chat_agent.agent.events import Event, ModelRetrying, ModelWaiting, TurnFailed, TurnFinished
from chat_agent.agent.loop import FAILED_NOTE, Agent, Turn, run_turn
from chat_agent.config import ConfigError, Settings
from chat_agent.context.conversation import ConversationManager
from chat_agent.context.tokens import TokenCounter
from chat_agent.model import AnthropicClient, ModelClient, TextDelta, model_client
from chat_agent.store import CreateConversation
from chat_agent.tooling import ToolRegistry
from tests import pace
from tests.cancelling import cancel_within
from tests.fakes.anthropic_fake import Fault, Reply
from tests.fakes.openai_fake import Fault as OpenAIFault
from tests.fakes.openai_fake import FakeOpenAI
from tests.fakes.openai_fake import Reply as OpenAIReply
from tests.support import polled

OWNER, CONV = "alice", "c1"
EVERY = 0.2  # seconds between "still waiting" events in these tests


@pytest.fixture
async def conv(db) -> ConversationManager:
    db[1].submit([CreateConversation(OWNER, CONV, 1.0)])
    return ConversationManager(OWNER, CONV, model=(), counter=TokenCounter(), writer=db[1],
                               summary_chars=300_000, max_tokens=200_000)


@pytest.fixture(scope="module")
def openai_fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def settings(fake, *, idle: float = 10.0, retries: int = 2, **extra: Any) -> Settings:
    return Settings(anthropic_api_key=fake.api_key, anthropic_base_url=fake.base_url, llm_max_retries=retries,
                    status_interval=EVERY, model_idle_timeout=idle, **extra)


def ask(conv: ConversationManager, model: str = "claude-test") -> Turn:
    conv.add_user([{"type": "text", "text": "Hello?"}])
    return Turn(owner=OWNER, conversation_id=CONV, model=model, system="You are being tested.", tools=[])


async def timed(model: ModelClient, config: Settings, conv: ConversationManager,
                turn: Turn) -> list[tuple[float, Event]]:
    """Every event of the turn with the seconds since it began."""
    agent = Agent(model, ToolRegistry(), config)
    began = time.monotonic()
    try:
        async with aclosing(run_turn(agent, conv, turn)) as events:
            return [(time.monotonic() - began, event) async for event in events]
    finally:
        await model.close()


def of(kind: type, events: list[tuple[float, Event]]) -> list[tuple[float, Any]]:
    return [(at, e) for at, e in events if isinstance(e, kind)]


def text(events: list[tuple[float, Event]]) -> str:
    return "".join(e.text for _, e in of(TextDelta, events))


async def test_a_silent_model_is_told_at_a_steady_pace_until_it_speaks(fake_anthropic, conv):
    silence = 1.2
    fake_anthropic.enqueue(Reply("Here at last.", lead_delay=silence))
    config = settings(fake_anthropic)
    events = await timed(AnthropicClient(config), config, conv, ask(conv))
    waiting = of(ModelWaiting, events)
    first_text = of(TextDelta, events)[0][0]
    assert text(events) == "Here at last." and isinstance(events[-1][1], TurnFinished)
    assert first_text >= silence
    # one every EVERY seconds while silent: 6 expected; a loaded machine merges some, never adds
    assert 3 <= len(waiting) <= silence / EVERY + 1, [round(e.elapsed, 2) for _, e in waiting]
    assert all(at < first_text for at, _ in waiting)  # none once the model spoke
    elapsed = [e.elapsed for _, e in waiting]
    assert elapsed == sorted(elapsed) and elapsed[0] >= EVERY * 0.9
    assert all(e.elapsed <= at + 0.01 for at, e in waiting)  # elapsed since the call began, not more
    gaps = [b - a for a, b in zip([0.0, *elapsed], [*elapsed, first_text])]
    assert max(gaps) < EVERY * 4, gaps  # never a long silence: at most a few missed beats


async def test_a_prompt_model_is_not_interrupted_by_status(fake_anthropic, conv):
    fake_anthropic.enqueue(Reply("Quick."))
    config = settings(fake_anthropic, idle=5.0)
    events = await timed(AnthropicClient(config), config, conv, ask(conv))
    assert text(events) == "Quick." and not of(ModelWaiting, events) and not of(ModelRetrying, events)


async def test_each_retry_is_told_with_its_attempt_and_why(fake_anthropic, conv):
    fake_anthropic.enqueue(Fault.status(529), Fault.midstream_error(after_events=1), Reply("Third time lucky."))
    before = len(fake_anthropic.requests)
    config = settings(fake_anthropic)
    events = await timed(AnthropicClient(config, backoff=0.05), config, conv, ask(conv))
    retries = [e for _, e in of(ModelRetrying, events)]
    assert [(r.attempt, r.attempts) for r in retries] == [(2, 3), (3, 3)]
    assert retries[0].reason == "is overloaded (529)" and retries[1].reason == "is overloaded during the reply"
    assert all(0 < r.delay < 1 for r in retries) and retries[0].elapsed < retries[1].elapsed
    assert text(events) == "Third time lucky." and events[-1][1].stop_reason == "end_turn"
    assert len(fake_anthropic.requests) - before == 3
    assert not of(TurnFailed, events)


async def test_a_retry_waits_what_the_api_asks_and_that_wait_is_not_silence(fake_anthropic, conv):
    """Retry-After 1 s against an idle bound of 0.6 s: the announced wait does not count as the
    model's silence, and the next try starts only after it."""
    fake_anthropic.enqueue(Fault.status(529, retry_after=1), Reply("Waited."))
    config = settings(fake_anthropic, idle=0.6)
    events = await timed(AnthropicClient(config), config, conv, ask(conv))
    (at, retry), = of(ModelRetrying, events)
    assert retry.delay == 1.0 and retry.attempt == 2
    assert of(TextDelta, events)[0][0] - at >= 1.0
    assert text(events) == "Waited." and not of(TurnFailed, events)


async def test_the_last_failure_is_the_turns_error_after_the_told_retries(fake_anthropic, conv):
    fake_anthropic.enqueue(*[Fault.status(500)] * 2)
    config = settings(fake_anthropic, retries=1)
    events = await timed(AnthropicClient(config, backoff=0.01), config, conv, ask(conv))
    assert [(e.attempt, e.attempts) for _, e in of(ModelRetrying, events)] == [(2, 2)]
    (_, failed), = of(TurnFailed, events)
    assert failed.code == "llm_error" and "500" in failed.message
    assert events[-1][1].stop_reason == "error"


async def test_a_model_silent_past_the_idle_bound_ends_the_call(fake_anthropic, conv):
    idle = 0.8
    fake_anthropic.enqueue(Reply("Never said.", lead_delay=60))
    before = len(fake_anthropic.requests)
    config = settings(fake_anthropic, idle=idle)
    began = time.monotonic()
    events = await timed(AnthropicClient(config), config, conv, ask(conv))
    took = time.monotonic() - began
    (at, failed), = of(TurnFailed, events)
    assert failed.code == "llm_error" and "sent nothing for 0.8 s" in failed.message
    assert "CHAT_AGENT_MODEL_IDLE_TIMEOUT" in failed.message
    assert idle <= at < idle + pace.scaled(3) and took < idle + pace.scaled(5)
    assert len(of(ModelWaiting, events)) >= 2 and events[-1][1].stop_reason == "error"
    assert not of(ModelRetrying, events)  # a call given up is not tried again
    record = fake_anthropic.requests[before]
    await polled(lambda: record.disconnected, 5)  # the request was closed, not left hanging


async def test_a_stream_that_stalls_midway_ends_at_the_idle_bound_keeping_its_text(fake_anthropic, conv):
    fake_anthropic.enqueue(Reply("Half of a sentence that", chunk_size=5, hang_after_events=5))
    config = settings(fake_anthropic, idle=0.6)
    events = await timed(AnthropicClient(config), config, conv, ask(conv))
    assert text(events) and isinstance(events[-2][1], TurnFailed) and events[-1][1].stop_reason == "error"
    kept = "".join(block["text"] for block in conv.messages[-1]["content"])
    assert kept.startswith(text(events).strip()) and kept.endswith(FAILED_NOTE)


async def test_abort_while_waiting_closes_the_call(fake_anthropic, conv):
    fake_anthropic.enqueue(Reply("Too late.", lead_delay=60))
    before = len(fake_anthropic.requests)
    config = settings(fake_anthropic)
    agent = Agent(AnthropicClient(config), ToolRegistry(), config)
    waited = asyncio.Event()

    async def consume() -> None:
        async with aclosing(run_turn(agent, conv, ask(conv))) as events:
            async for event in events:
                if isinstance(event, ModelWaiting):
                    waited.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(waited.wait(), 5)
    await cancel_within(task, 1.0)
    record = fake_anthropic.requests[before]
    await polled(lambda: record.disconnected, 5)
    await agent.model.close()


async def test_the_openai_compatible_client_shares_the_path(openai_fake, conv):
    openai_fake.drop_queue()
    config = Settings(openai_api_key=openai_fake.api_key, openai_base_url=openai_fake.base_url, model="openai:m",
                      small_model="openai:m", llm_max_retries=2, status_interval=EVERY, model_idle_timeout=0.8)
    openai_fake.enqueue(OpenAIFault(503), OpenAIReply("After a retry.", delay=0.05))
    events = await timed(model_client(config), config, conv, ask(conv, "openai:m"))
    (_, retry), = of(ModelRetrying, events)
    assert (retry.attempt, retry.attempts, retry.reason) == (2, 3, "failed (503)")
    assert text(events) == "After a retry."
    left = openai_fake.left
    openai_fake.enqueue(OpenAIReply("Never said.", hang_after=0))
    events = await timed(model_client(config), config, conv, ask(conv, "openai:m"))
    (_, failed), = of(TurnFailed, events)
    assert "sent nothing for 0.8 s" in failed.message and len(of(ModelWaiting, events)) >= 2
    await polled(lambda: openai_fake.left > left, 5)


def test_the_idle_bound_is_configured_in_seconds():
    assert Settings.from_env({}).model_idle_timeout == 120.0
    assert Settings.from_env({"CHAT_AGENT_MODEL_IDLE_TIMEOUT": "45.5"}).model_idle_timeout == 45.5
    for wrong in ("0", "-3", "soon"):
        with pytest.raises(ConfigError, match="CHAT_AGENT_MODEL_IDLE_TIMEOUT"):
            Settings.from_env({"CHAT_AGENT_MODEL_IDLE_TIMEOUT": wrong})
