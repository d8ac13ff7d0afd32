"""Every HTTP error in one shape, `{"error": {"code", "message"}}` (PROTOCOL.md 1.1, "HTTP
errors"): the routes' own refusals, the edge's, Starlette's 404 and 405, and whatever escapes
a route (500). WebSocket frame codes are not used on HTTP."""

from __future__ import annotations

from http import HTTPStatus
from typing import Literal, Mapping

from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from chat_agent.quotas import QuotaExceeded

HttpErrorCode = Literal[
    "invalid_request", "unauthorized", "forbidden_origin", "not_found", "method_not_allowed", "too_large",
    "unsupported_type", "rate_limited", "internal",
    "invalid_attachment", "invalid_upload",  # 1.0's own, kept where they were
]
CODES: dict[int, HttpErrorCode] = {
    400: "invalid_request", 401: "unauthorized", 403: "forbidden_origin", 404: "not_found",
    405: "method_not_allowed", 413: "too_large", 415: "unsupported_type", 429: "rate_limited", 500: "internal",
}


def error(status: int, code: HttpErrorCode, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def reason(exc: Exception) -> str:
    """What was wrong with a request body, in one line: the first of pydantic's errors."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        return f"{'.'.join(str(p) for p in first['loc']) or 'body'}: {first['msg']}"
    return str(exc)


def _message(request: Request, exc: HTTPException) -> str:
    if exc.detail != HTTPStatus(exc.status_code).phrase:
        return exc.detail  # said by whoever raised it
    if exc.status_code == 404:
        return f"There is no route {request.url.path}."
    if exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        return f"{request.method} is not allowed on {request.url.path}; it answers {allowed}."
    return f"{exc.detail}."


async def http_exception(request: Request, exc: HTTPException) -> Response:
    """Starlette's own HTTPExceptions (an unknown route, a wrong method) and any a route raises."""
    status = exc.status_code
    code = CODES.get(status, "internal" if status >= 500 else "invalid_request")
    return error(status, code, _message(request, exc), exc.headers)


async def internal_error(request: Request, exc: Exception) -> Response:
    """Anything a route did not expect (a full disk, say). Starlette logs the exception after
    this answer; the client learns nothing of it but that it failed."""
    return error(500, "internal", "The server failed to handle this request; it is logged.")


def rate_limited(exc: QuotaExceeded) -> JSONResponse:
    """429 with Retry-After (PROTOCOL 1.2 "Quotas"); the body names the limit too."""
    return JSONResponse({"error": {"code": "rate_limited", "message": exc.message, "retryAfter": exc.retry_after,
                                   "limit": exc.name}},
                        status_code=429, headers={"Retry-After": str(exc.retry_after)})


async def quota_exceeded(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, QuotaExceeded)
    return rate_limited(exc)


EXCEPTION_HANDLERS = {HTTPException: http_exception, QuotaExceeded: quota_exceeded, Exception: internal_error}
