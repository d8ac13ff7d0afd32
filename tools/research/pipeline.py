"""Deep research: plan sub-questions, search them concurrently, read the best pages, write a cited report.

The pipeline knows nothing of Exa or of tools: it is handed a `search` function, a model
client and a progress callback. One deadline bounds it all. The gathering stages (plan,
search) stop early enough to leave the writer its share of the time, and write from what
they found; if even the writer runs out of time, the report is the list of pages read.
Cancellation (abort) passes straight through every stage. The report's citations are
checked and renumbered, and its Sources list added, by `citations.cite`.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from .citations import Source, cite
from chat_agent.tooling import LLMError, ModelClient, ModelReply, ModelRequest, TextDelta, one_line, shorten

SEARCH_CONCURRENCY = 5  # Exa answers a handful of searches per second per key
WRITE_SHARE = 0.4  # of the whole time, kept for writing the report
PLAN_SHARE = 0.25  # of the gathering time the planner may take before the question is searched as is
PLAN_MAX_SECONDS = 30.0
PLAN_TOKENS = 600
WRITE_TOKENS = 6_000  # a long report; more would mostly be time
WRITE_PROGRESS_EVERY = 2.0  # seconds between "Writing the report (~N words)" updates
QUERY_CHARS = 200
EXCERPT_CHARS = 600  # per page, in the list returned when no report could be written


@dataclass(frozen=True, slots=True)
class Page:
    """A search result: where it is and (the start of) its text."""

    title: str
    url: str
    text: str
    published: str | None = None


Search = Callable[[str], Awaitable[list[Page]]]  # raises on failure
Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Limits:
    model: str  # writes the report
    small_model: str  # plans the searches
    queries: int  # sub-questions to ask the planner for
    max_searches: int
    sources: int  # pages to read
    timeout: float  # seconds for the whole research
    total_chars: int = 48_000  # of page text given to the writer
    page_chars: int = 6_000


@dataclass(slots=True)
class Report:
    markdown: str  # ends with the "Sources" list
    sources: list[Source]  # numbered as the report cites them
    queries: list[str]
    searches: int  # searches that finished (answered or failed)
    pages_read: int
    notes: list[str]  # what went wrong or was cut short, for the model and the user
    timed_out: bool


class ResearchError(RuntimeError):
    """The research could not produce anything; the message says why."""


@dataclass(slots=True)
class _Found:
    queries: list[str] = field(default_factory=list)
    results: dict[int, list[Page]] = field(default_factory=dict)  # by query index
    failures: list[str] = field(default_factory=list)

    @property
    def searches(self) -> int:
        return len(self.results) + len(self.failures)


async def research(question: str, *, model: ModelClient, search: Search, limits: Limits, progress: Progress) -> Report:
    """A cited markdown report on `question`. ResearchError when nothing usable was found."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limits.timeout
    found, notes, timed_out = _Found(), [], False
    gathering = asyncio.timeout_at(deadline - limits.timeout * WRITE_SHARE)
    try:
        async with gathering:
            found.queries = await _plan(question, model, limits, progress, notes)
            await _search_all(found, search, progress)
    except TimeoutError:
        if not gathering.expired():
            raise
        timed_out = True
        notes.append(f"Time ran out after {found.searches} of {len(found.queries)} searches; "
                     "the report uses what they found.")  # fmt: skip
    pages = _select(found, limits, timed_out)
    if found.failures:
        notes.append(f"{len(found.failures)} of {len(found.queries)} searches failed: " + "; ".join(found.failures[:3]))
    progress(f"Reading {_plural(len(pages), 'page')}")
    sources = [Source(n, page.title, page.url) for n, page in enumerate(pages, 1)]
    writing = asyncio.timeout_at(deadline)
    try:
        async with writing:
            text = await _write(question, pages, model, limits.model, notes, progress)
    except TimeoutError:
        if not writing.expired():
            raise
        notes.append(f"Time ran out ({limits.timeout:g} s) before the report was written; "
                     "these are the pages it read.")  # fmt: skip
        return Report(_page_list(pages), sources, found.queries, found.searches, len(pages), notes, True)
    markdown, cited = cite(text, sources, notes)
    return Report(markdown, cited, found.queries, found.searches, len(pages), notes, timed_out)


# -- plan ---------------------------------------------------------------------------------

PLAN_SYSTEM = """You plan web research. Split the user's question into {count} distinct sub-questions that together cover it, and write one web search query for each: a short description of the page that would answer it (not a question), with the names, versions and dates that matter.
Answer with JSON only, no prose: {{"queries": ["...", "..."]}}"""


async def _plan(question: str, model: ModelClient, limits: Limits, progress: Progress, notes: list[str]) -> list[str]:
    count = max(1, min(limits.queries, limits.max_searches))
    progress("Planning sub-questions")
    request = ModelRequest(
        model=limits.small_model,
        max_tokens=PLAN_TOKENS,
        system=PLAN_SYSTEM.format(count=f"{min(3, count)} to {count}" if count > 3 else str(count)),
        messages=[{"role": "user", "content": f"Today is {_today()}.\n\nQuestion: {question}"}],
    )
    planning = asyncio.timeout(min(PLAN_MAX_SECONDS, limits.timeout * (1 - WRITE_SHARE) * PLAN_SHARE))
    try:
        async with planning:
            answer = await model.complete(request)
    except TimeoutError:
        if not planning.expired():
            raise
        answer, why = "", "the planner did not answer in time"
    except LLMError as exc:
        answer, why = "", f"the planner failed ({exc.message})"
    else:
        why = "the planner's answer could not be read"
    queries = parse_queries(answer)[:count]
    if queries:
        return queries
    notes.append(f"Searched the question as asked: {why}.")
    return [_clean_query(question)]


def parse_queries(answer: str) -> list[str]:
    """The queries in a planner's answer: JSON, maybe fenced or wrapped in prose; [] if none."""
    value = _first_json(answer)
    if isinstance(value, dict):
        value = value.get("queries", next((v for v in value.values() if isinstance(v, list)), None))
    if not isinstance(value, list):
        return []
    queries: dict[str, str] = {}  # lower-cased → as written: drops repeats, keeps order
    for item in value:
        if isinstance(item, dict):
            item = item.get("query") or item.get("q") or item.get("search")
        if isinstance(item, str) and (query := _clean_query(item)):
            queries.setdefault(query.lower(), query)
    return list(queries.values())


def _first_json(text: str) -> object:
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[\[{]", text):
        try:
            return decoder.raw_decode(text, match.start())[0]
        except ValueError:
            continue
    return None


def _clean_query(text: str) -> str:
    return shorten(one_line(text), QUERY_CHARS)


# -- search and read ------------------------------------------------------------------------


async def _search_all(found: _Found, search: Search, progress: Progress) -> None:
    total, gate = len(found.queries), asyncio.Semaphore(SEARCH_CONCURRENCY)

    def report() -> None:
        failed = f", {len(found.failures)} failed" if found.failures else ""
        progress(f"Searching {_plural(total, 'query', 'queries')} ({found.searches}/{total} done{failed})")

    async def one(index: int, query: str) -> None:
        async with gate:
            try:
                found.results[index] = await search(query)
            except Exception as exc:  # one failed search is a note, not the end of the research
                found.failures.append(f"“{shorten(query, 60)}”: {shorten(str(exc) or type(exc).__name__, 200)}")
        report()

    report()
    async with asyncio.TaskGroup() as group:
        for index, query in enumerate(found.queries):
            group.create_task(one(index, query))


def _select(found: _Found, limits: Limits, timed_out: bool) -> list[Page]:
    """The best pages: each query's first, then each one's second..., each URL once, text capped."""
    if not found.results:
        if timed_out:
            raise ResearchError(f"Research ran out of time ({limits.timeout:g} s) before any search finished.")
        raise ResearchError("Every search failed: " + "; ".join(found.failures[:3]))
    ranked = [found.results[i] for i in sorted(found.results)]
    chosen: dict[str, Page] = {}
    for rank in range(max(map(len, ranked))):
        for pages in ranked:
            if rank < len(pages) and pages[rank].text.strip() and len(chosen) < limits.sources:
                chosen.setdefault(_url_key(pages[rank].url), pages[rank])
    if not chosen:
        raise ResearchError("The searches found no pages with text for: " + "; ".join(found.queries))
    pages = list(chosen.values())
    caps = _allot([min(len(p.text.strip()), limits.page_chars) for p in pages], limits.total_chars)
    return [Page(p.title.strip() or _host(p.url), p.url, shorten(p.text.strip(), cap), p.published)
            for p, cap in zip(pages, caps)]  # fmt: skip


def _allot(lengths: list[int], total: int) -> list[int]:
    """Share `total` characters: short pages keep all of theirs, long ones split the rest evenly."""
    caps, budget = [0] * len(lengths), total
    for left, i in enumerate(sorted(range(len(lengths)), key=lengths.__getitem__)):
        caps[i] = min(lengths[i], budget // (len(lengths) - left))
        budget -= caps[i]
    return caps


def _url_key(url: str) -> str:
    """The same page under a different spelling of its URL counts once."""
    key = re.sub(r"^https?://(www\.)?", "", url.strip().lower()).split("#", 1)[0]
    return key.rstrip("/")


def _host(url: str) -> str:
    return re.sub(r"^https?://(www\.)?", "", url).split("/", 1)[0] or url


# -- write ----------------------------------------------------------------------------------

WRITE_SYSTEM = """You write research reports from web sources. Use only the numbered sources you are given, not your own memory.
Write markdown: a "# " title, a direct answer to the question in a short opening paragraph, then sections as the question needs. Be specific: names, numbers, dates.
Cite every factual claim right after it with the number of the source that supports it in square brackets, like [2], or [1][3] for several. Cite only numbers of the sources given. Where sources disagree or say little, say so.
Do not write a list of sources at the end: it is added after your report."""


async def _write(question: str, pages: list[Page], model: ModelClient, name: str, notes: list[str],
                 progress: Progress) -> str:  # fmt: skip
    progress("Writing the report")
    blocks = [f'<source n="{n}">\nTitle: {p.title}\nURL: {p.url}\n'
              + (f"Published: {p.published[:10]}\n" if p.published else "") + f"Text:\n{p.text}\n</source>"
              for n, p in enumerate(pages, 1)]  # fmt: skip
    prompt = (f"Today is {_today()}.\n\nQuestion: {question}\n\nSources:\n\n" + "\n\n".join(blocks)
              + "\n\nWrite the report on the question, citing the sources by number.")  # fmt: skip
    request = ModelRequest(model=name, max_tokens=WRITE_TOKENS, system=WRITE_SYSTEM,
                           messages=[{"role": "user", "content": prompt}])  # fmt: skip
    loop = asyncio.get_running_loop()
    written, told, reply = 0, loop.time(), None
    async for item in model.stream(request):
        if isinstance(item, TextDelta):
            written += len(item.text)
            if loop.time() - told >= WRITE_PROGRESS_EVERY:
                told = loop.time()
                progress(f"Writing the report (~{written // 6} words)")
        elif isinstance(item, ModelReply):
            reply = item
    if reply is None:  # stream() ends with the reply unless it raised; never silently
        raise ResearchError("The model's reply ended without a message.")
    text = "".join(b["text"] for b in reply.content if b["type"] == "text").strip()
    if reply.stop_reason == "refusal" or not text:
        raise ResearchError("The model wrote no report" + (" (it declined)." if reply.stop_reason == "refusal" else "."))
    if reply.stop_reason == "max_tokens":
        notes.append("The report was cut off at the length limit.")
    return text


# -- when no report could be written --------------------------------------------------------


def _page_list(pages: list[Page]) -> str:
    """What the research has when no report could be written: the pages, each with its start."""
    parts = ["# Sources found (no report: the research ran out of time)"]
    for n, page in enumerate(pages, 1):
        excerpt = one_line(shorten(page.text, EXCERPT_CHARS))
        parts.append(f"[{n}] {one_line(page.title)} — {page.url}\n\n> {excerpt}")
    return "\n\n".join(parts)


# -- small helpers --------------------------------------------------------------------------


def _today() -> str:
    return datetime.date.today().isoformat()


def _plural(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else many or one + 's'}"
