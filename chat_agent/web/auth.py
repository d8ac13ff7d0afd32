"""Who is calling: a token from `CHAT_AGENT_API_KEYS`, or the one local user when auth is off."""

from __future__ import annotations

import hmac
from typing import Mapping

from chat_agent.config import Settings

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


def _bearer(headers: Mapping[str, str]) -> str | None:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def authenticate(settings: Settings, headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The user's name, or None when auth is on and the credential is missing or wrong."""
    if not settings.auth_enabled:
        return settings.local_user
    presented = _bearer(headers) or query.get("token")
    if not presented:
        return None
    user = None
    for token, name in settings.api_keys.items():
        # compare every key in constant time so timing does not reveal a near match
        if hmac.compare_digest(token.encode(), presented.encode()):
            user = name
    return user


def refuse_open_listen(settings: Settings) -> str | None:
    """Why the server must not start: no auth on an address others can reach."""
    if settings.auth_enabled or settings.allow_no_auth or settings.host in LOOPBACK_HOSTS:
        return None
    return (f"Refusing to listen on {settings.host} without authentication: set CHAT_AGENT_API_KEYS "
            "(user:token,...) or, if you really mean it, CHAT_AGENT_ALLOW_NO_AUTH=1.")
