"""web_search against the Exa fake: a real HTTP server on loopback speaking Exa's wire format."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from chat_agent.config import Settings
from chat_agent.tooling import ToolAvailability, ToolRegistry, ToolResult
from tests.cancelling import cancel_within
from tests.fakes.exa_fake import FakeExa, page, page_text
from tools import build_registry, web_search

QUERY = "rust async runtimes compared"


def settings_for(exa: FakeExa, **overrides: object) -> Settings:
    return Settings(exa_api_key=exa.api_key, exa_base_url=exa.base_url, **overrides)  # type: ignore[arg-type]


async def search(registry: ToolRegistry, query: str = QUERY, statuses: list[str] | None = None) -> ToolResult:
    sink = statuses if statuses is not None else []
    return await registry.run(
        "toolu_ws", "web_search", {"query": query}, conversation_id="c", owner="o",
        on_progress=lambda _id, _elapsed, status: sink.append(status),
    )  # fmt: skip


@pytest.mark.asyncio
async def test_results_reach_the_model_and_the_ui(exa: FakeExa) -> None:
    statuses: list[str] = []
    result = await search(build_registry(settings_for(exa)), statuses=statuses)
    assert not result.is_error
    expected = [page(QUERY, n, web_search.TEXT_CHARS) for n in range(1, 6)]
    assert result.output == {
        "query": QUERY,
        "results": [{"title": p["title"], "url": p["url"], "publishedDate": p["publishedDate"]} for p in expected],
    }
    content = result.content
    assert isinstance(content, str) and content.startswith(f"Web results for “{QUERY}”:")
    for n, p in enumerate(expected, 1):
        block = content.split(f"[{n}] ", 1)[1].split(f"\n\n[{n + 1}] ", 1)[0]
        assert block.startswith(f"{p['title']}\nURL: {p['url']}\nPublished: {p['publishedDate'][:10]}\n")
        assert block.endswith(page_text(QUERY, n)[: web_search.TEXT_CHARS].strip())
    assert statuses == [f"Searching the web for “{QUERY}”", "Found 5 results"]


@pytest.mark.asyncio
async def test_request_uses_exas_wire_format(exa: FakeExa) -> None:
    await search(build_registry(settings_for(exa)))
    (request,) = exa.requests
    assert (request.method, request.path) == ("POST", "/search")
    assert request.headers["x-api-key"] == exa.api_key
    assert request.body == {
        "query": QUERY,
        "numResults": 5,
        "type": "auto",
        "contents": {"text": {"maxCharacters": web_search.TEXT_CHARS}},
    }


@pytest.mark.asyncio
async def test_page_text_is_capped(exa: FakeExa) -> None:
    result = await search(build_registry(settings_for(exa)))
    assert len(page_text(QUERY, 1)) > web_search.TEXT_CHARS  # the fake's pages are longer than the cap
    for block in result.content.split("\n\n[")[1:]:
        text = block.split("\n", 3)[3]
        assert len(text) <= web_search.TEXT_CHARS


@pytest.mark.asyncio
async def test_wrong_key_is_an_error_result(exa: FakeExa) -> None:
    registry = build_registry(Settings(exa_api_key="wrong", exa_base_url=exa.base_url))
    result = await search(registry)
    assert result.is_error
    assert result.content == "WebSearchError: Exa rejected the API key (EXA_API_KEY) (HTTP 401): Invalid API key"
    assert "Traceback" not in result.content and "wrong" not in result.content


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("status", "meaning"),
    [(429, "Exa's rate limit was hit; try again in a moment"), (500, "Exa is having trouble"), (402, "out of credits")],
)
async def test_exa_failures_are_readable(exa: FakeExa, status: int, meaning: str) -> None:
    exa.fail_next(status)
    result = await search(build_registry(settings_for(exa)))
    assert result.is_error and meaning in result.content and f"(HTTP {status}): Injected failure {status}" in result.content
    assert not (await search(build_registry(settings_for(exa)))).is_error  # only the next one failed


@pytest.mark.asyncio
async def test_unreachable_exa_is_an_error_result() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = await search(build_registry(Settings(exa_api_key="k", exa_base_url=f"http://127.0.0.1:{port}")))
    assert result.is_error and result.content.startswith("WebSearchError: could not reach Exa")


@pytest.mark.asyncio
async def test_empty_query_is_rejected_before_exa(exa: FakeExa) -> None:
    result = await search(build_registry(settings_for(exa)), query="")
    assert result.is_error and result.content.startswith("Invalid input for web_search: query:")
    assert exa.requests == []


@pytest.mark.asyncio
async def test_slow_exa_gets_heartbeats_and_times_out(exa: FakeExa) -> None:
    exa.delay = 2.0
    registry = ToolRegistry(heartbeat=0.1)
    registry.add(web_search.build(settings_for(exa)), timeout=0.35)
    statuses: list[str] = []
    result = await search(registry, statuses=statuses)
    assert result.is_error and result.content == "Tool web_search timed out after 0.35 s"
    searching = f"Searching the web for “{QUERY}”"
    assert statuses[0] == searching and statuses.count(searching) >= 3  # the status, then heartbeats


@pytest.mark.asyncio
async def test_abort_during_a_search_returns_at_once(exa: FakeExa) -> None:
    exa.delay = 5.0
    registry = build_registry(settings_for(exa))
    statuses: list[str] = []
    task = asyncio.create_task(search(registry, statuses=statuses))
    while not exa.requests:  # the request reached Exa
        await asyncio.sleep(0.01)
    await cancel_within(task, 0.2)


def test_unavailable_without_a_key() -> None:
    registry = build_registry(Settings())
    assert ToolAvailability("web_search", False, "EXA_API_KEY is not set") in registry.availability()
    assert "web_search" not in registry.enabled()
    assert "web_search" not in [schema["name"] for schema in registry.schemas()]


def test_offered_with_a_key(exa: FakeExa) -> None:
    registry = build_registry(settings_for(exa))
    assert ToolAvailability("web_search", True) in registry.availability()
    (schema,) = registry.schemas(["web_search"])
    assert schema["name"] == "web_search" and list(schema["input_schema"]["properties"]) == ["query"]
    assert schema["input_schema"]["required"] == ["query"]


def test_fake_rejects_bad_requests_like_exa(exa: FakeExa) -> None:
    with httpx.Client(base_url=exa.base_url) as client:
        check_fake_responses(client, exa.api_key)


def check_fake_responses(client: httpx.Client, api_key: str) -> None:
    url, key = "/search", {"x-api-key": api_key}
    no_key = client.post(url, json={"query": "q"})
    assert no_key.status_code == 401 and no_key.json()["tag"] == "INVALID_API_KEY" and "requestId" in no_key.json()
    snake = client.post(url, json={"query": "q", "num_results": 3}, headers=key)
    assert snake.status_code == 400 and "num_results" in snake.json()["error"]
    assert client.post(url, json={"query": ""}, headers=key).status_code == 400
    assert client.post(url, content=b"{not json", headers=key).status_code == 400
    short = client.post(url, json={"query": "q", "numResults": 2, "contents": {"text": {"maxCharacters": 50}}}, headers=key)
    body = short.json()
    assert [len(r["text"]) for r in body["results"]] == [50, 50]
    assert body["resolvedSearchType"] == "neural" and body["costDollars"]["total"] > 0
    bare = client.post(url, json={"query": "q", "numResults": 1}, headers=key).json()["results"][0]
    assert "text" not in bare and bare["id"] == bare["url"]
