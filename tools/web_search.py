"""`web_search`: the model writes a query, Exa answers with pages and their text."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Annotated, Any

import httpx
from langchain_core.tools import BaseTool, InjectedToolArg, tool
from pydantic import Field

from chat_agent.tooling import PerLoop, Settings, ToolContext, ToolUnavailable, shorten

from .demo_search import CannedSearch

if TYPE_CHECKING:
    from exa_py import AsyncExa
    from exa_py.api import Result

NAME = "web_search"
NUM_RESULTS = 5
SEARCH_TYPE = "auto"
TEXT_CHARS = 3_000  # per result: five pages stay near 15k characters of context

DESCRIPTION = """Search the web and read the top pages.

Use it for anything recent, niche or checkable: news, facts, prices, docs, people.
Write the query as a short description of the page you want to find, not as a
question. Returns 5 results with title, URL, published date and the start of
each page's text; cite the URLs you use."""


class WebSearchError(RuntimeError):
    """Exa failed; the message says how, for the model and the user."""


def build(settings: Settings) -> BaseTool:
    # The demo server without an Exa key searches canned pages, so a first look shows the tool.
    exa: ExaSearch | CannedSearch = CannedSearch() if settings.demo and not settings.exa_api_key else connect(settings)

    @tool(NAME, description=DESCRIPTION, response_format="content_and_artifact")
    async def web_search(
        query: Annotated[str, Field(min_length=1, description="What to search for.")],
        ctx: Annotated[ToolContext, InjectedToolArg],
    ) -> tuple[str, dict[str, Any]]:
        ctx.progress(f"Searching the web for “{shorten(query, 80)}”")
        results = await exa.search(query)
        ctx.progress(f"Found {len(results)} result{'' if len(results) == 1 else 's'}")
        return _content(query, results), _artifact(query, results)

    # It only reads: a turn that continues after a failure may run it again.
    web_search.metadata = {"repeatable": True}
    return web_search


def connect(settings: Settings) -> ExaSearch:
    """The Exa client for a tool's build(); ToolUnavailable when EXA_API_KEY is not set."""
    if not settings.exa_api_key:
        raise ToolUnavailable("EXA_API_KEY is not set")
    # Imported here, not at the top: exa_py pulls in openai (~1.6 s), which only a
    # configured server should pay, and at start-up rather than on the event loop.
    from exa_py import AsyncExa
    from exa_py.errors import ExaTimeoutError

    return ExaSearch(AsyncExa, ExaTimeoutError, settings)


class ExaSearch:
    """exa-py's AsyncExa (truly async: httpx underneath), one per event loop.

    Its httpx client belongs to the loop it first ran on; reusing it keeps the
    TLS connection to Exa warm between searches. The first one is made at build
    time because making one loads the CA bundle (~90 ms), which should not stall
    the event loop in the middle of a turn.
    """

    def __init__(self, client_class: type[AsyncExa], timeout_error: type[Exception], settings: Settings) -> None:
        self._client_class = client_class
        self._timeout_error = timeout_error
        self._api_key = settings.exa_api_key
        self._base_url = (settings.exa_base_url or "https://api.exa.ai").rstrip("/")  # exa-py appends "/search"
        self._timeout = settings.tool_timeout
        self._clients = PerLoop(self._new_client)

    async def search(self, query: str, *, num_results: int = NUM_RESULTS, text_chars: int = TEXT_CHARS) -> list[Result]:
        """The top pages for `query`, each with the start of its text; WebSearchError on failure."""
        try:
            response = await self._clients.get().search(
                query,
                num_results=num_results,
                type=SEARCH_TYPE,
                contents={"text": {"max_characters": text_chars}},
            )
        except self._timeout_error as exc:
            raise WebSearchError(f"Exa did not answer in time ({exc})") from exc
        except ValueError as exc:  # exa-py's only error for an HTTP error status
            raise _explain(exc) from exc
        except httpx.TransportError as exc:  # no connection, or it broke mid-way
            raise WebSearchError(f"could not reach Exa: {exc}") from exc
        return list(response.results)

    def _new_client(self) -> AsyncExa:
        client = self._client_class(self._api_key, api_base=self._base_url, timeout=self._timeout)
        client.client  # noqa: B018 - builds the httpx client now (see the class docstring)
        return client


_STATUS = re.compile(r"Request failed with status code (\d{3}): (.*)", re.DOTALL)
_MEANING = {
    400: "Exa rejected the request",
    401: "Exa rejected the API key (EXA_API_KEY)",
    402: "the Exa account is out of credits",
    403: "Exa refused the request",
    429: "Exa's rate limit was hit; try again in a moment",
}


def _explain(exc: ValueError) -> Exception:
    """exa-py reports an HTTP error as ValueError('Request failed with status code N: body')."""
    match = _STATUS.match(str(exc))
    if match is None:
        return exc
    status, body = int(match[1]), match[2].strip()
    try:
        detail = json.loads(body).get("error") or body
    except (ValueError, AttributeError):
        detail = body
    meaning = _MEANING.get(status, "Exa is having trouble" if status >= 500 else "Exa failed")
    return WebSearchError(f"{meaning} (HTTP {status}): {shorten(str(detail), 300)}")


def _content(query: str, results: list[Result]) -> str:
    if not results:
        return f"No web results for “{query}”."
    parts = [f"Web results for “{query}”:"]
    for n, result in enumerate(results, 1):
        lines = [f"[{n}] {result.title or '(untitled)'}", f"URL: {result.url}"]
        if result.published_date:
            lines.append(f"Published: {result.published_date[:10]}")
        text = (result.text or "").strip()
        lines.append(shorten(text, TEXT_CHARS) if text else "(no text)")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _artifact(query: str, results: list[Result]) -> dict[str, Any]:
    return {
        "query": query,
        "results": [{"title": r.title, "url": r.url, "publishedDate": r.published_date} for r in results],
    }
