"""A real HTTP server on loopback that answers like Exa's `POST /search`.

The wire format is the one exa-py 2.x speaks: an `x-api-key` header, a camelCase
JSON body (`query`, `numResults`, `type`, `contents.text.maxCharacters`), and a
response with `requestId`, `resolvedSearchType`, `results[]` (`id`, `url`,
`title`, `publishedDate`, `author`, `score`, `text`...), `searchTime` and
`costDollars`. Errors are `{"requestId", "error", "tag"}` with the status Exa uses.

    with FakeExa() as exa:
        settings = Settings(exa_api_key=exa.api_key, exa_base_url=exa.base_url)
        exa.fail_next(429)      # the next request gets a 429
        exa.delay = 2.0         # every request waits 2 s before answering
        exa.query_delays["q"] = 5.0   # ...but a search for "q" waits 5 s
        exa.requests[-1].body   # what the client sent
        exa.reset()             # between tests sharing one server
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import deque
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fakes.loopback import LoopbackServer

DEFAULT_TEXT_CHARS = 10_000  # Exa's default when text is requested without a limit
PAGE_CHARS = 12_000  # longer than any limit the tests ask for, so capping shows
SEARCH_TYPES = {"auto", "fast", "deep-lite", "deep", "deep-reasoning", "neural", "instant", "lite", "keyword"}
BODY_FIELDS = {
    "query", "numResults", "type", "contents", "includeDomains", "excludeDomains",
    "startPublishedDate", "endPublishedDate", "startCrawlDate", "endCrawlDate",
    "includeText", "excludeText", "category", "userLocation", "moderation", "flags",
    "additionalQueries", "systemPrompt", "outputSchema", "objective", "userIdentifier",
}  # fmt: skip
CONTENTS_FIELDS = {"text", "highlights", "summary", "livecrawl", "livecrawlTimeout", "maxAgeHours", "subpages", "extras", "context"}
TAGS = {400: "INVALID_REQUEST_BODY", 401: "INVALID_API_KEY", 402: "NO_MORE_CREDITS", 403: "ACCESS_DENIED",
        429: "RATE_LIMIT_EXCEEDED", 500: "INTERNAL_ERROR", 502: "BAD_GATEWAY", 503: "SERVICE_UNAVAILABLE"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: Any  # decoded JSON, or the raw text when it is not JSON


class BadRequest(Exception):
    pass


class FakeExa(LoopbackServer):
    name = "Exa"

    def __init__(self, *, api_key: str = "exa-test-key", delay: float = 0.0) -> None:
        super().__init__()
        self.api_key = api_key
        self.delay = delay
        self.query_delays: dict[str, float] = {}  # by query, instead of `delay`
        self.requests: list[RecordedRequest] = []
        self._failures: deque[tuple[int, str | None]] = deque()

    def fail_next(self, status: int, message: str | None = None, *, times: int = 1) -> None:
        """Answer the next `times` requests with `status` and an Exa error body."""
        self._failures.extend([(status, message)] * times)

    def reset(self) -> None:
        """Forget requests, pending failures and the delays (one server shared by many tests)."""
        self.requests.clear()
        self._failures.clear()
        self.delay = 0.0
        self.query_delays.clear()

    def routes(self) -> list[Route]:
        return [Route("/search", self._search, methods=["POST"])]

    async def _search(self, request: Request) -> JSONResponse:
        raw = (await request.body()).decode("utf-8", "replace")
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw
        self.requests.append(RecordedRequest(request.method, request.url.path, dict(request.headers), body))
        request_id = hashlib.sha256(f"{len(self.requests)}:{raw}".encode()).hexdigest()[:32]
        if self._failures:
            status, message = self._failures.popleft()
            return _error(status, message or f"Injected failure {status}", request_id)
        key = request.headers.get("x-api-key")
        if not key:
            return _error(401, "Missing API key: send it in the x-api-key header", request_id)
        if key != self.api_key:
            return _error(401, "Invalid API key", request_id)
        asked = body.get("query") if isinstance(body, dict) else None
        await self._wait(self.query_delays.get(asked, self.delay) if isinstance(asked, str) else self.delay)
        try:
            query, count, search_type, text_chars = _parse(body)
        except BadRequest as exc:
            return _error(400, str(exc), request_id)
        return JSONResponse(_response(request_id, query, count, search_type, text_chars))


def _error(status: int, message: str, request_id: str) -> JSONResponse:
    return JSONResponse({"requestId": request_id, "error": message, "tag": TAGS.get(status, "ERROR")}, status_code=status)


def _parse(body: Any) -> tuple[str, int, str, int | None]:
    """(query, numResults, type, text characters or None for no text); BadRequest otherwise."""
    if not isinstance(body, dict):
        raise BadRequest("Request body must be a JSON object")
    unknown = sorted(set(body) - BODY_FIELDS)
    if unknown:
        raise BadRequest(f"Unrecognized key(s) in object: {', '.join(map(repr, unknown))}")
    query = body.get("query")
    if not isinstance(query, str) or not query.strip():
        raise BadRequest("query: must be a non-empty string")
    count = body.get("numResults", 10)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 100:
        raise BadRequest("numResults: must be an integer between 1 and 100")
    search_type = body.get("type", "auto")
    if search_type not in SEARCH_TYPES:
        raise BadRequest(f"type: must be one of {', '.join(sorted(SEARCH_TYPES))}")
    return query, count, search_type, _text_chars(body.get("contents"))


def _text_chars(contents: Any) -> int | None:
    if contents is None:
        return None
    if not isinstance(contents, dict):
        raise BadRequest("contents: must be an object")
    unknown = sorted(set(contents) - CONTENTS_FIELDS)
    if unknown:
        raise BadRequest(f"contents: unrecognized key(s): {', '.join(map(repr, unknown))}")
    text = contents.get("text", False)
    if isinstance(text, bool):
        return DEFAULT_TEXT_CHARS if text else None
    if not isinstance(text, dict):
        raise BadRequest("contents.text: must be a boolean or an object")
    limit = text.get("maxCharacters", DEFAULT_TEXT_CHARS)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise BadRequest("contents.text.maxCharacters: must be a positive integer")
    return limit


def _response(request_id: str, query: str, count: int, search_type: str, text_chars: int | None) -> dict[str, Any]:
    results = [page(query, n, text_chars) for n in range(1, count + 1)]
    return {
        "requestId": request_id,
        "resolvedSearchType": "neural" if search_type == "auto" else search_type,
        "searchType": search_type,
        "results": results,
        "searchTime": 42.0,
        "costDollars": {
            "total": round(0.005 + (0.001 * count if text_chars else 0), 4),
            "search": {"neural": 0.005},
            **({"contents": {"text": round(0.001 * count, 4)}} if text_chars else {}),
        },
    }


def page(query: str, n: int, text_chars: int | None) -> dict[str, Any]:
    """The n-th (1-based) result for `query`: the same query always gives the same pages."""
    digest = hashlib.sha256(f"{query}\n{n}".encode()).hexdigest()
    slug = re.sub(r"[^a-z0-9]+", "-", query.lower()).strip("-")[:40] or "page"
    url = f"https://{digest[:6]}.example.com/{slug}/{n}"
    result: dict[str, Any] = {
        "id": url,
        "url": url,
        "title": f"{query} — source {n}",
        "publishedDate": f"2025-{int(digest[6:8], 16) % 12 + 1:02d}-{int(digest[8:10], 16) % 28 + 1:02d}T00:00:00.000Z",
        "author": f"Author {digest[10:14]}",
        "score": round(0.9 - 0.05 * n, 4),
        "favicon": f"https://{digest[:6]}.example.com/favicon.ico",
    }
    if text_chars is not None:
        result["text"] = page_text(query, n)[:text_chars]
    return result


def page_text(query: str, n: int) -> str:
    """The whole text of a page, longer than any cap, with a recognisable start."""
    sentence = f"Page {n} about {query} says something useful. "
    return (f"Start of page {n} for {query}. " + sentence * (PAGE_CHARS // len(sentence) + 1))[:PAGE_CHARS]
