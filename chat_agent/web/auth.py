"""Who is calling: a static key from `CHAT_AGENT_API_KEYS`, a JWT of the identity provider
(`CHAT_AGENT_JWT_ISSUER`: web/jwt_auth.py), or the one local user when auth is off."""

from __future__ import annotations

import hmac
from typing import Mapping

from chat_agent.config import Settings
from chat_agent.web.jwt_auth import JwtVerifier

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


def _bearer(headers: Mapping[str, str]) -> str | None:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def presented(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    return _bearer(headers) or query.get("token") or None


class Authenticator:
    """One per app: holds the identity provider's keys between requests."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.jwt = (JwtVerifier(settings.jwt_issuer, settings.jwt_audience, user_claim=settings.jwt_user_claim,
                                algorithms=settings.jwt_algorithms, refresh=settings.jwks_refresh)
                    if settings.jwt_issuer else None)

    async def close(self) -> None:
        if self.jwt is not None:
            await self.jwt.close()

    async def user(self, headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
        """The user's id, or None when auth is on and the credential is missing or wrong."""
        if not self.settings.auth_enabled:
            return self.settings.local_user
        token = presented(headers, query)
        if not token:
            return None
        user = static_user(self.settings, token)
        if user is None and self.jwt is not None and JwtVerifier.looks_like_jwt(token):
            user = await self.jwt.user(token)
        return user


def static_user(settings: Settings, token: str) -> str | None:
    user = None
    for key, name in settings.api_keys.items():
        # compare every key in constant time so timing does not reveal a near match
        if hmac.compare_digest(key.encode(), token.encode()):
            user = name
    return user


def refuse_open_listen(settings: Settings) -> str | None:
    """Why the server must not start: no auth on an address others can reach."""
    if settings.auth_enabled or settings.allow_no_auth or settings.host in LOOPBACK_HOSTS:
        return None
    return (f"Refusing to listen on {settings.host} without authentication: set CHAT_AGENT_API_KEYS "
            "(user:token,...) or CHAT_AGENT_JWT_ISSUER, or, if you really mean it, CHAT_AGENT_ALLOW_NO_AUTH=1.")
