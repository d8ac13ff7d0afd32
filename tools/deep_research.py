"""`deep_research`: plan, search through Exa concurrently, read the best pages, write a cited report.

The pipeline is `chat_agent.research`; this module gives it Exa (web_search's client) and the
turn's model client, and shapes the result for the model and for the UI.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from langchain_core.tools import BaseTool, InjectedToolArg, tool
from pydantic import Field

from .research.pipeline import Limits, Page, Report, research
from chat_agent.tooling import Settings, ToolContext

from .web_search import connect

NAME = "deep_research"
RESULTS_PER_SEARCH = 5
TIMEOUT_MARGIN = 30.0  # seconds the registry waits past research_timeout: the research stops itself first
Depth = Literal["quick", "standard", "thorough"]
DEPTHS: dict[str, tuple[int, int]] = {"quick": (3, 5), "standard": (5, 8), "thorough": (6, 12)}  # queries, pages

DESCRIPTION = """Research a question in depth on the web and write a cited report.

Use it when the user wants research, a thorough comparison or an answer that needs many
sources; for a quick fact use web_search. It plans sub-questions, runs several searches at
once, reads the best pages and returns a markdown report whose claims cite numbered
sources, ending with the list of sources. It takes a minute or two. The user sees the
full report; give them its gist and keep its citations."""


def build(settings: Settings) -> BaseTool:
    exa = connect(settings)  # ToolUnavailable without EXA_API_KEY

    async def search(query: str, page_chars: int) -> list[Page]:
        results = await exa.search(query, num_results=RESULTS_PER_SEARCH, text_chars=page_chars)
        return [Page(r.title or "", r.url, r.text or "", r.published_date) for r in results]

    @tool(NAME, description=DESCRIPTION, response_format="content_and_artifact")
    async def deep_research(
        question: Annotated[str, Field(min_length=1, max_length=2_000, description="The question to research, with its context.")],
        ctx: Annotated[ToolContext, InjectedToolArg],
        depth: Annotated[Depth, Field(description="quick: 3 searches, 5 pages; standard: 5 and 8; thorough: 6 and 12.")] = "standard",
    ) -> tuple[str, dict[str, Any]]:  # fmt: skip
        model = ctx.model
        question = question.strip()
        if not question:
            raise ValueError("the question is blank")
        limits = limits_for(settings, depth)
        report = await research(
            question, model=model, limits=limits, progress=ctx.progress,
            search=lambda query: search(query, limits.page_chars),
        )  # fmt: skip
        return _content(question, report), _output(report)

    deep_research.metadata = {"timeout": settings.research_timeout + TIMEOUT_MARGIN}
    return deep_research


def limits_for(settings: Settings, depth: str) -> Limits:
    queries, pages = DEPTHS[depth]
    return Limits(
        model=settings.model,
        small_model=settings.small_model,
        queries=queries,
        max_searches=max(1, settings.research_max_searches),
        sources=pages,
        timeout=settings.research_timeout,
    )


def _content(question: str, report: Report) -> str:
    head = (f"Deep research on “{question}”: {report.searches} searches, {report.pages_read} pages read, "
            f"{len(report.sources)} sources in the report.")  # fmt: skip
    notes = "".join(f"\nNote: {note}" for note in report.notes)
    ask = ("\nThe user sees this report in full. Tell them the gist and what it rests on, keeping its [n] "
           "citations, and say plainly what it could not establish.")  # fmt: skip
    return f"{head}{notes}{ask}\n\n{report.markdown}"


def _output(report: Report) -> dict[str, Any]:
    return {
        "report": report.markdown,
        "sources": [{"n": s.n, "title": s.title, "url": s.url} for s in report.sources],
        "queries": report.queries,
        "searches": report.searches,
        "pagesRead": report.pages_read,
        "notes": report.notes,
        "timedOut": report.timed_out,
    }
