"""Sign-in with an identity provider: bearer JWTs checked against the issuer's keys.

The issuer's OIDC discovery document (`{issuer}/.well-known/openid-configuration`) names its
JWKS; the keys are fetched once and kept. A token signed with a key we do not know (the
issuer rotated its keys) fetches the JWKS again, at most once per `refresh` seconds, so a
flood of made-up `kid`s cannot turn us into a flood on the issuer. PyJWT checks the
signature, `exp`/`nbf`/`iat` (with a little leeway for clocks), `iss` and `aud`; only the
asymmetric algorithms configured are accepted, never `none` and never an HMAC (whose
"secret" would be the public key).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import httpx
import jwt

log = logging.getLogger(__name__)

LEEWAY = 30  # seconds of clock difference tolerated on exp / nbf / iat
FETCH_TIMEOUT = 10.0
MAX_DOCUMENT_BYTES = 1 << 20


class JwtVerifier:
    def __init__(self, issuer: str, audience: tuple[str, ...], *, user_claim: str = "sub",
                 algorithms: tuple[str, ...] = ("RS256",), refresh: float = 30.0,
                 client: httpx.AsyncClient | None = None) -> None:
        self.issuer = issuer
        self.audience = list(audience)
        self.user_claim = user_claim
        self.algorithms = list(algorithms)
        self.refresh = refresh
        self._client = client or httpx.AsyncClient(timeout=FETCH_TIMEOUT, follow_redirects=False, trust_env=False)
        self._keys: dict[str, jwt.PyJWK] = {}
        self._unnamed: list[jwt.PyJWK] = []  # keys without a `kid`: tried in turn
        self._fetched_at = float("-inf")
        self._lock = asyncio.Lock()

    async def close(self) -> None:
        await self._client.aclose()

    @staticmethod
    def looks_like_jwt(token: str) -> bool:
        return token.count(".") == 2 and token.startswith("ey")

    async def user(self, token: str) -> str | None:
        """The user id the token names, or None when it is not a valid token of the issuer
        for our audience (why goes to the log at INFO, never to the client)."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            log.info("refused a JWT: %s", exc)
            return None
        if header.get("alg") not in self.algorithms:
            log.info("refused a JWT signed with %r (allowed: %s)", header.get("alg"), ", ".join(self.algorithms))
            return None
        keys = await self._keys_for(header.get("kid"))
        for key in keys:
            try:
                claims = jwt.decode(token, key=key, algorithms=self.algorithms, audience=self.audience,
                                    issuer=self.issuer, leeway=LEEWAY,
                                    options={"require": ["exp", "iss", "aud"], "verify_sub": False})
            except jwt.InvalidSignatureError:
                continue  # another key without a kid may fit
            except jwt.InvalidTokenError as exc:
                log.info("refused a JWT: %s", exc)
                return None
            user = claims.get(self.user_claim)
            if isinstance(user, str) and user.strip():
                return user
            log.info("refused a JWT without a string %r claim", self.user_claim)
            return None
        log.info("refused a JWT: no key of the issuer verifies it (kid %r)", header.get("kid"))
        return None

    async def _keys_for(self, kid: Any) -> list[jwt.PyJWK]:
        known = self._matching(kid)
        if known:
            return known
        async with self._lock:
            known = self._matching(kid)
            if not known and time.monotonic() - self._fetched_at >= self.refresh:
                await self._fetch()
                known = self._matching(kid)
        return known

    def _matching(self, kid: Any) -> list[jwt.PyJWK]:
        if isinstance(kid, str) and kid in self._keys:
            return [self._keys[kid]]
        return list(self._unnamed) if kid is None else []

    async def _fetch(self) -> None:
        """The issuer's keys, through its discovery document. A failure keeps the keys we had."""
        self._fetched_at = time.monotonic()
        try:
            discovery = await self._json(self.issuer.rstrip("/") + "/.well-known/openid-configuration")
            if discovery.get("issuer") != self.issuer:
                raise ValueError(f"the discovery document names issuer {discovery.get('issuer')!r}")
            jwks_uri = discovery.get("jwks_uri")
            if not isinstance(jwks_uri, str) or not jwks_uri.startswith(("https://", "http://")):
                raise ValueError("the discovery document has no jwks_uri")
            document = await self._json(jwks_uri)
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("could not fetch the signing keys of %s: %s", self.issuer, exc)
            return
        keys: dict[str, jwt.PyJWK] = {}
        unnamed: list[jwt.PyJWK] = []
        for data in document.get("keys", []) if isinstance(document.get("keys"), list) else []:
            if not isinstance(data, dict) or data.get("use", "sig") != "sig":
                continue
            try:
                key = jwt.PyJWK(data)
            except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
                continue  # a key type or curve we do not support: the others still work
            if isinstance(data.get("kid"), str):
                keys[data["kid"]] = key
            else:
                unnamed.append(key)
        self._keys, self._unnamed = keys, unnamed
        log.info("fetched %d signing key(s) of %s", len(keys) + len(unnamed), self.issuer)

    async def _json(self, url: str) -> dict[str, Any]:
        response = await self._client.get(url, headers={"Accept": "application/json"})
        response.raise_for_status()
        if len(response.content) > MAX_DOCUMENT_BYTES:
            raise ValueError(f"{url} answered more than {MAX_DOCUMENT_BYTES} bytes")
        data = json.loads(response.content)
        if not isinstance(data, dict):
            raise ValueError(f"{url} did not answer a JSON object")
        return data
