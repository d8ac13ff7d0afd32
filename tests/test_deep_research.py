"""deep_research through a real ToolRegistry, against the Exa fake and the Anthropic fake (both real HTTP servers)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from tools.research.citations import Source, cite
from chat_agent.config import Settings
from chat_agent.model import AnthropicClient as ModelClient
from tools.research.pipeline import parse_queries
from chat_agent.tooling import ToolAvailability, ToolRegistry, ToolResult, ToolServices, ToolUnavailable
from tests import pace
from tests.cancelling import cancel_within
from tests.fakes.anthropic_fake import FakeAnthropic, Fault, Reply
from tests.fakes.exa_fake import FakeExa, page
from tools import build_registry, deep_research

MAIN, SMALL = "claude-research-main", "claude-research-small"
def slack() -> float:
    """Scheduling on a busy machine: a bound is the time limit plus this."""
    return pace.scaled(0.5)
QUESTION = "How do Rust async runtimes compare?"
QUERIES = ["tokio runtime design", "async-std status 2025", "smol executor benchmarks"]
REPORT = """# Rust async runtimes

Tokio dominates the ecosystem [1]. async-std is discontinued [2][9], smol stays small [3, 2].
Benchmarks differ [1-2]; see [3](https://example.com/x).

## Sources
[1] Made up — https://invented.example/
"""


@pytest.fixture(scope="module")
def anthropic_server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
def llm(anthropic_server: FakeAnthropic) -> FakeAnthropic:
    anthropic_server.clear()
    return anthropic_server


@pytest.fixture
async def model(anthropic_server: FakeAnthropic) -> AsyncIterator[ModelClient]:
    client = ModelClient(settings_for(anthropic_server, None))
    yield client
    await client.close()


def settings_for(llm: FakeAnthropic, exa: FakeExa | None, **overrides: object) -> Settings:
    return Settings(anthropic_api_key=llm.api_key, anthropic_base_url=llm.base_url, llm_max_retries=0,  # type: ignore[arg-type]
                    model=MAIN, small_model=SMALL, exa_api_key=exa and exa.api_key,
                    exa_base_url=exa and exa.base_url, **overrides)  # fmt: skip


def registry_for(settings: Settings) -> ToolRegistry:
    tool = deep_research.build(settings)
    registry = ToolRegistry(heartbeat=60)  # no heartbeats among the statuses under test
    registry.add(tool, timeout=tool.metadata["timeout"])
    return registry


def script(llm: FakeAnthropic, *, plan: Reply | Fault | None = None, report: Reply | Fault | None = None) -> None:
    if plan is not None:
        llm.enqueue(plan, when=lambda body: body["model"] == SMALL)
    if report is not None:
        llm.enqueue(report, when=lambda body: body["model"] == MAIN)


def plan_reply(queries: list[str]) -> Reply:
    return Reply("Here is the plan:\n```json\n" + json.dumps({"queries": queries}) + "\n```")


async def run(registry: ToolRegistry, model: ModelClient, statuses: list[str] | None = None, **tool_input: object) -> ToolResult:
    sink = statuses if statuses is not None else []
    return await registry.run(
        "toolu_dr", "deep_research", {"question": QUESTION, **tool_input}, conversation_id="c", owner="o",
        on_progress=lambda _id, _elapsed, status: sink.append(status), services=ToolServices(model=model),
    )  # fmt: skip


def assert_valid_requests(llm: FakeAnthropic) -> None:
    assert llm.requests and all(r.status == 200 and r.error is None for r in llm.requests), [r.error for r in llm.requests]


def writer_prompt(llm: FakeAnthropic) -> str:
    (request,) = [r for r in llm.requests if r["model"] == MAIN]
    return request["messages"][0]["content"]


@pytest.mark.asyncio
async def test_plans_searches_reads_and_writes_a_cited_report(llm: FakeAnthropic, exa: FakeExa, model: ModelClient) -> None:
    script(llm, plan=plan_reply(QUERIES), report=Reply(REPORT))
    statuses: list[str] = []
    result = await run(registry_for(settings_for(llm, exa)), model, statuses)
    assert not result.is_error, result.content
    assert statuses == [
        "Planning sub-questions",
        "Searching 3 queries (0/3 done)", "Searching 3 queries (1/3 done)",
        "Searching 3 queries (2/3 done)", "Searching 3 queries (3/3 done)",
        "Reading 8 pages", "Writing the report",
    ]  # fmt: skip
    # Each query's first page, then each one's second...: eight pages, numbered in that order.
    read = [page(QUERIES[q], rank, None) for rank in (1, 2, 3) for q in range(3)][:8]
    prompt = writer_prompt(llm)
    for n, p in enumerate(read, 1):
        assert f'<source n="{n}">\nTitle: {p["title"]}\nURL: {p["url"]}\nPublished: {p["publishedDate"][:10]}\n' in prompt
    # Cited in order of first use: source 1 → [1], 2 → [2], 3 → [3]; [9] does not exist.
    cited = [read[0], read[1], read[2]]
    sources = [{"n": n, "title": p["title"], "url": p["url"]} for n, p in enumerate(cited, 1)]
    body = ("# Rust async runtimes\n\nTokio dominates the ecosystem [1]. async-std is discontinued [2], "
            "smol stays small [2][3].\nBenchmarks differ [1][2]; see [3].")  # fmt: skip
    listing = "## Sources\n\n" + "\n".join(f"- [{s['n']}] {s['title']} — {s['url']}" for s in sources)
    output = result.output
    assert output["report"] == f"{body}\n\n{listing}"
    assert output["sources"] == sources and output["queries"] == QUERIES
    assert (output["searches"], output["pagesRead"], output["timedOut"]) == (3, 8, False)
    assert output["notes"] == ["Removed citations of sources that do not exist: [9]."]
    assert result.content.startswith(f"Deep research on “{QUESTION}”: 3 searches, 8 pages read, 3 sources in the report.")
    assert result.content.endswith(output["report"])
    assert sorted(r.body["query"] for r in exa.requests) == sorted(QUERIES)
    assert all(r.body["numResults"] == 5 and r.body["contents"] == {"text": {"maxCharacters": 6000}} for r in exa.requests)
    assert_valid_requests(llm)
    (plan,) = [r for r in llm.requests if r["model"] == SMALL]
    assert "3 to 5 distinct sub-questions" in plan["system"] and QUESTION in plan["messages"][0]["content"]


@pytest.mark.asyncio
async def test_sources_list_is_added_when_the_model_forgets_it(llm: FakeAnthropic, exa: FakeExa, model: ModelClient) -> None:
    script(llm, plan=plan_reply(QUERIES[:1]), report=Reply("# Short\n\nTokio is popular [2]."))
    result = await run(registry_for(settings_for(llm, exa)), model, depth="quick")
    second = page(QUERIES[0], 2, None)
    assert result.output["report"] == f"# Short\n\nTokio is popular [1].\n\n## Sources\n\n- [1] {second['title']} — {second['url']}"
    assert result.output["sources"] == [{"n": 1, "title": second["title"], "url": second["url"]}]
    assert result.output["pagesRead"] == 5  # quick: five pages


@pytest.mark.asyncio
async def test_searches_run_concurrently(llm: FakeAnthropic, exa: FakeExa, model: ModelClient) -> None:
    queries = [f"query number {n}" for n in range(5)]
    script(llm, plan=plan_reply(queries), report=Reply("# R\n\nA claim [1]."))
    exa.delay = 0.6
    statuses: list[str] = []
    task = asyncio.create_task(run(registry_for(settings_for(llm, exa)), model, statuses))
    while len(exa.requests) < 5:  # all five reach Exa...
        await asyncio.sleep(0.01)
    assert "Searching 5 queries (1/5 done)" not in statuses  # ...before any of them was answered
    began = time.monotonic()
    result = await task
    assert not result.is_error and result.output["searches"] == 5
    assert time.monotonic() - began < 5 * exa.delay  # one delay, not five


@pytest.mark.asyncio
async def test_a_failed_search_is_noted(llm: FakeAnthropic, exa: FakeExa, model: ModelClient) -> None:
    script(llm, plan=plan_reply(QUERIES), report=Reply("# R\n\nA claim [1]."))
    exa.fail_next(500)
    statuses: list[str] = []
    result = await run(registry_for(settings_for(llm, exa)), model, statuses)
    assert not result.is_error and result.output["searches"] == 3
    (note,) = result.output["notes"]
    assert note.startswith("1 of 3 searches failed: “") and "Exa is having trouble (HTTP 500)" in note
    assert "Searching 3 queries (3/3 done, 1 failed)" in statuses
    assert f"Note: {note}" in result.content
    assert result.output["pagesRead"] == 8  # two queries still give ten pages


@pytest.mark.asyncio
async def test_every_search_failing_is_an_error(llm: FakeAnthropic, exa: FakeExa, model: ModelClient) -> None:
    script(llm, plan=plan_reply(QUERIES))
    exa.fail_next(402, times=3)
    result = await run(registry_for(settings_for(llm, exa)), model)
    assert result.is_error
    assert result.content.startswith("ResearchError: Every search failed: “")
    assert "the Exa account is out of credits (HTTP 402)" in result.content
    assert [r["model"] for r in llm.requests] == [SMALL]  # no report was asked for


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("plan", "why"),
    [
        (Reply("Sure! I'd search for a few things about runtimes."), "the planner's answer could not be read"),
        (Reply('{"queries": [3, "", {"nope": 1}]}'), "the planner's answer could not be read"),
        (Fault.status(500), "the planner failed (The model API failed (500): api_error: Internal server error)"),
        (Reply(json.dumps({"queries": QUERIES}), delay=0.5), "the planner did not answer in time"),
    ],
)
async def test_planner_trouble_falls_back_to_the_question(
    llm: FakeAnthropic, exa: FakeExa, model: ModelClient, plan: Reply | Fault, why: str
) -> None:
    script(llm, plan=plan, report=Reply("# R\n\nA claim [1]."))
    result = await run(registry_for(settings_for(llm, exa, research_timeout=2.0)), model)  # planner gets 0.3 s
    assert not result.is_error, result.content
    assert [r.body["query"] for r in exa.requests] == [QUESTION]
    assert result.output["queries"] == [QUESTION]
    assert result.output["notes"] == [f"Searched the question as asked: {why}."]
    assert result.output["pagesRead"] == 5


@pytest.mark.asyncio
async def test_max_searches_is_respected(llm: FakeAnthropic, exa: FakeExa, model: ModelClient) -> None:
    many = [f"sub-question {n}" for n in range(6)]
    script(llm, plan=plan_reply(many), report=Reply("# R\n\nA claim [1]."))
    result = await run(registry_for(settings_for(llm, exa, research_max_searches=2)), model, depth="thorough")
    assert sorted(r.body["query"] for r in exa.requests) == many[:2]
    assert result.output["queries"] == many[:2] and result.output["searches"] == 2
    (plan,) = [r for r in llm.requests if r["model"] == SMALL]
    assert "into 2 distinct sub-questions" in plan["system"]


@pytest.mark.asyncio
async def test_abort_during_the_searches_stops_at_once(llm: FakeAnthropic, exa: FakeExa, model: ModelClient) -> None:
    script(llm, plan=plan_reply(QUERIES))
    exa.delay = 5.0
    task = asyncio.create_task(run(registry_for(settings_for(llm, exa)), model))
    while len(exa.requests) < 3:
        await asyncio.sleep(0.01)
    await cancel_within(task, 1.0)
    assert [r["model"] for r in llm.requests] == [SMALL]


@pytest.mark.asyncio
async def test_abort_while_writing_closes_the_model_call(llm: FakeAnthropic, exa: FakeExa, model: ModelClient) -> None:
    script(llm, plan=plan_reply(QUERIES[:1]), report=Reply("# R\n\nA claim [1].", hang_after_events=3))
    task = asyncio.create_task(run(registry_for(settings_for(llm, exa)), model))
    while not [r for r in llm.requests if r.get("model") == MAIN and r.events_sent >= 3]:
        await asyncio.sleep(0.01)
    await cancel_within(task, 1.0)
    (writer,) = [r for r in llm.requests if r["model"] == MAIN]
    await asyncio.to_thread(writer.finished.wait, 2)
    assert writer.disconnected


@pytest.mark.asyncio
async def test_time_running_out_before_any_search_is_an_error(llm: FakeAnthropic, exa: FakeExa, model: ModelClient) -> None:
    script(llm, plan=plan_reply(QUERIES))
    exa.delay = 5.0
    began = time.monotonic()
    result = await run(registry_for(settings_for(llm, exa, research_timeout=1.0)), model)
    assert time.monotonic() - began < 1.0 + slack()  # the searches get 60% of the time, the writer the rest
    assert result.is_error and result.content == "ResearchError: Research ran out of time (1 s) before any search finished."


@pytest.mark.asyncio
async def test_time_running_out_mid_search_writes_from_what_was_found(
    llm: FakeAnthropic, exa: FakeExa, model: ModelClient
) -> None:
    script(llm, plan=plan_reply(QUERIES), report=Reply("# R\n\nA claim [1]."))
    exa.query_delays[QUERIES[2]] = 5.0
    began = time.monotonic()
    result = await run(registry_for(settings_for(llm, exa, research_timeout=2.0)), model)
    assert 1.1 < time.monotonic() - began < 2.0 + slack()  # the searches stop at 60% of the time, all by 2 s
    assert not result.is_error
    assert result.output["notes"] == ["Time ran out after 2 of 3 searches; the report uses what they found."]
    assert (result.output["searches"], result.output["pagesRead"], result.output["timedOut"]) == (2, 8, True)
    assert QUERIES[2] not in writer_prompt(llm)


@pytest.mark.asyncio
async def test_time_running_out_while_writing_returns_the_pages(llm: FakeAnthropic, exa: FakeExa, model: ModelClient) -> None:
    script(llm, plan=plan_reply(QUERIES[:1]), report=Reply("# R\n\nA claim [1]. " * 50, delay=0.2, chunk_size=20))
    began = time.monotonic()
    result = await run(registry_for(settings_for(llm, exa, research_timeout=1.5)), model)
    assert 1.4 < time.monotonic() - began < 1.5 + slack()
    assert not result.is_error
    output = result.output
    assert output["timedOut"] and output["notes"] == [
        "Time ran out (1.5 s) before the report was written; these are the pages it read."]
    first = page(QUERIES[0], 1, None)
    assert output["report"].startswith("# Sources found (no report: the research ran out of time)\n\n"
                                       f"[1] {first['title']} — {first['url']}\n\n> Start of page 1 for")  # fmt: skip
    assert [s["url"] for s in output["sources"]] == [page(QUERIES[0], n, None)["url"] for n in range(1, 6)]
    assert "Note: Time ran out (1.5 s) before the report was written" in result.content


@pytest.mark.asyncio
async def test_writer_failure_is_an_error(llm: FakeAnthropic, exa: FakeExa, model: ModelClient) -> None:
    script(llm, plan=plan_reply(QUERIES[:1]), report=Fault.status(400, message="prompt is too long"))
    result = await run(registry_for(settings_for(llm, exa)), model)
    assert result.is_error and result.content.startswith("LLMError: The model API failed (400)")


@pytest.mark.asyncio
async def test_question_is_required(llm: FakeAnthropic, exa: FakeExa, model: ModelClient) -> None:
    result = await run(registry_for(settings_for(llm, exa)), model, question="")
    assert result.is_error and result.content.startswith("Invalid input for deep_research: question:")
    blank = await run(registry_for(settings_for(llm, exa)), model, question="  \n ")
    assert blank.is_error and blank.content == "ValueError: the question is blank"
    bad_depth = await run(registry_for(settings_for(llm, exa)), model, depth="forever")
    assert bad_depth.is_error and "depth" in bad_depth.content
    assert exa.requests == [] and llm.requests == []


def test_unavailable_without_exa(anthropic_server: FakeAnthropic) -> None:
    with pytest.raises(ToolUnavailable, match="^EXA_API_KEY is not set$"):
        deep_research.build(settings_for(anthropic_server, None))
    registry = build_registry(settings_for(anthropic_server, None))
    assert ToolAvailability("deep_research", False, "EXA_API_KEY is not set") in registry.availability()


def test_schema_and_timeout(anthropic_server: FakeAnthropic, fake_exa: FakeExa) -> None:
    settings = settings_for(anthropic_server, fake_exa, research_timeout=100.0)
    tool = deep_research.build(settings)
    assert tool.metadata == {"timeout": 130.0}
    registry = ToolRegistry()
    registry.add(tool)
    (schema,) = registry.schemas()
    properties = schema["input_schema"]["properties"]
    assert list(properties) == ["question", "depth"] and schema["input_schema"]["required"] == ["question"]
    assert properties["depth"]["enum"] == ["quick", "standard", "thorough"] and properties["depth"]["default"] == "standard"


# -- the pure parts --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "queries"),
    [
        ('{"queries": ["a b", "  c\\n d ", "A B"]}', ["a b", "c d"]),
        ('["x", {"query": "y"}]', ["x", "y"]),
        ("Plan: {not json} then {\"subQuestions\": [\"z\"]}", ["z"]),
        ("```json\n{\"queries\": []}\n```", []),
        ("nothing here", []),
    ],
)
def test_parse_queries(answer: str, queries: list[str]) -> None:
    assert parse_queries(answer) == queries


def test_cite_renumbers_strips_and_lists() -> None:
    sources = [Source(n, f"T{n}", f"https://s{n}.example/") for n in range(1, 5)]
    notes: list[str] = []
    text = "Claim [4]. Other [2; 4] and [0] and [7-8].\nNew line [1]\n[9] starts a line.\n\n**Sources:**\n- whatever"
    markdown, cited = cite(text, sources, notes)
    assert markdown == ("Claim [1]. Other [1][2] and and.\nNew line [3]\n starts a line.\n\n## Sources\n\n"
                        "- [1] T4 — https://s4.example/\n- [2] T2 — https://s2.example/\n- [3] T1 — https://s1.example/")  # fmt: skip
    assert cited == [Source(1, "T4", "https://s4.example/"), Source(2, "T2", "https://s2.example/"),
                     Source(3, "T1", "https://s1.example/")]  # fmt: skip
    assert notes == ["Removed citations of sources that do not exist: [0], [7], [8], [9]."]


def test_cite_without_citations_lists_every_source() -> None:
    sources = [Source(1, "T1", "https://a.example/"), Source(2, "T2", "https://b.example/")]
    notes: list[str] = []
    markdown, cited = cite("No citations at all.", sources, notes)
    assert cited == sources and markdown.endswith("- [1] T1 — https://a.example/\n- [2] T2 — https://b.example/")
    assert notes == ["The report cites none of its sources; all the pages read are listed."]
