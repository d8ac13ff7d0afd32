"""Sign-in with an identity provider (PROTOCOL 1.2): the server verifies JWTs against a real
OpenID Provider on loopback (panva's certified `oidc-provider` under Node, tests/oidc), found
through its discovery document; users sign in there through its real login and consent pages
and the authorization-code flow. Expired, wrong-audience, wrong-issuer, `alg: none`, tampered
and unknown-key tokens are refused with `unauthorized` (HTTP 401; WebSocket `error` + 4401);
a rotation of the provider's keys is picked up; static API keys keep working beside it."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import pytest
import websockets
from cryptography.hazmat.primitives.asymmetric import rsa

from tests import node_kit
from tests.fakes.anthropic_fake import Reply
from tests.support import ROOT, connect, free_port, send, until

KIT = ROOT / "tests" / "oidc"
REDIRECT = "http://127.0.0.1/callback"


def _key(kid: str) -> tuple[rsa.RSAPrivateKey, dict]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key))
    jwk.update(kid=kid, alg="RS256", use="sig")
    return key, jwk


class OpenIdProvider:
    """`node provider.mjs PORT KEYS` in its own process group, restartable on its port with new keys."""

    def __init__(self, kit: Path, work: Path) -> None:
        self.kit, self.work = kit, work
        self.port = free_port()
        self.proc: subprocess.Popen[str] | None = None
        self.keys: dict[str, rsa.RSAPrivateKey] = {}

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *kids: str) -> "OpenIdProvider":
        jwks = []
        for kid in kids:
            self.keys[kid], jwk = _key(kid)
            jwks.append(jwk)
        path = self.work / f"keys-{'-'.join(kids)}.json"
        path.write_text(json.dumps({"keys": jwks}))
        self.proc = subprocess.Popen(["node", "provider.mjs", str(self.port), str(path)], cwd=self.kit, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        self.proc = None

    async def sign_in(self, user: str, client_id: str = "chat-agent") -> str:
        """The ID token of `user`, through the provider's login and consent pages."""
        async with httpx.AsyncClient(base_url=self.issuer, timeout=10) as client:
            found = (await client.get("/.well-known/openid-configuration")).json()
            response = await client.get(found["authorization_endpoint"], params={
                "client_id": client_id, "response_type": "code", "scope": "openid", "redirect_uri": REDIRECT,
                "state": "st", "nonce": "nn"})
            for _ in range(10):
                location = response.headers["location"]
                if location.startswith(REDIRECT):
                    break
                response = await client.get(location)
                if response.status_code == 200:  # the login page, then the consent page
                    action = re.search(r'action="([^"]+)"', response.text).group(1)
                    form = ({"prompt": "login", "login": user, "password": "any"} if 'name="login"' in response.text
                            else {"prompt": "consent"})
                    response = await client.post(action, data=form)
            code = parse_qs(urlsplit(location).query)["code"][0]
            token = await client.post(found["token_endpoint"], data={
                "grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT, "client_id": client_id,
                "client_secret": f"{client_id}-secret"})
            token.raise_for_status()
            return token.json()["id_token"]

    def forge(self, kid: str, **claims: object) -> str:
        """A token signed with the provider's own key `kid` (a key we hold: we made its keys)."""
        now = int(time.time())
        body = {"iss": self.issuer, "aud": "chat-agent", "sub": "mallory", "iat": now, "exp": now + 600, **claims}
        return jwt.encode(body, self.keys[kid], algorithm="RS256", headers={"kid": kid})


@pytest.fixture(scope="module")
def oidc_kit(tmp_path_factory) -> Path:
    """tests/oidc with its pinned oidc-provider installed."""
    return node_kit.install(KIT, tmp_path_factory.mktemp("oidc"), "the OpenID Provider")


@pytest.fixture
def provider(oidc_kit: Path, tmp_path: Path) -> Iterator[OpenIdProvider]:
    started = OpenIdProvider(oidc_kit, tmp_path).start("k1")
    yield started
    started.stop()


@pytest.fixture
def signin_server(make_server, provider):
    return make_server(CHAT_AGENT_JWT_ISSUER=provider.issuer, CHAT_AGENT_JWT_AUDIENCE="chat-agent",
                       CHAT_AGENT_API_KEYS="bob:tok-bob", CHAT_AGENT_JWKS_REFRESH="0.2")


async def _refused_on_the_socket(server, token: str) -> None:
    ws, first = await connect(server, token=token)
    assert first["type"] == "error" and first["code"] == "unauthorized", first
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await ws.recv()
    assert closed.value.rcvd.code == 4401


async def test_a_provider_s_user_signs_in_beside_static_keys(signin_server, provider, fake_anthropic):
    token = await provider.sign_in("alice")
    assert jwt.get_unverified_header(token)["kid"] == "k1"
    status, usage = signin_server.get("/api/usage", token=token)
    assert status == 200 and usage["user"] == "alice"
    fake_anthropic.enqueue(Reply("Hello Alice."))
    ws, session = await connect(signin_server, token=token)  # the token as the query parameter
    assert session["type"] == "session"
    await send(ws, type="message", content="hi")
    assert (await until(ws, "done"))[-1]["stopReason"] == "end_turn"
    await ws.close()
    mine = signin_server.get(f"/api/conversations/{session['conversationId']}", token=token)
    assert mine[0] == 200 and mine[1]["messages"][-1]["content"] == "Hello Alice."
    # Bob's static key works as before, and Alice's conversation is not his.
    assert signin_server.get("/api/usage", token="tok-bob")[1]["user"] == "bob"
    assert signin_server.get(f"/api/conversations/{session['conversationId']}", token="tok-bob")[0] == 404
    # /health tells a stranger only that it is up; a signed-in caller sees the details.
    assert signin_server.get("/health") == (200, {"status": "ok"})
    details = signin_server.get("/health", token=token)[1]
    assert details["signIn"] == {"apiKeys": True, "jwtIssuer": provider.issuer} and details["auth"] is True
    assert signin_server.get("/health", token="not-a-token")[0] == 401


async def test_bad_tokens_are_refused(signin_server, provider):
    now = int(time.time())
    header = base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT"}').rstrip(b"=").decode()
    claims = base64.urlsafe_b64encode(json.dumps({"iss": provider.issuer, "aud": "chat-agent", "sub": "mallory",
                                                  "exp": now + 600}).encode()).rstrip(b"=").decode()
    good = provider.forge("k1", sub="carol")
    assert signin_server.get("/api/usage", token=good)[1]["user"] == "carol"  # the forger holds the real key
    stranger, _ = _key("k1")  # the provider's kid, someone else's key
    unknown, _ = _key("k-unknown")
    bad = {
        "expired": provider.forge("k1", iat=now - 7200, exp=now - 3600),
        "another app's audience": await provider.sign_in("alice", client_id="other-app"),
        "another issuer": provider.forge("k1", iss="http://127.0.0.1:1"),
        "alg none": f"{header}.{claims}.",
        "HS256 with the public key": jwt.encode({"iss": provider.issuer, "aud": "chat-agent", "sub": "m", "exp": now + 60},
                                                "a-secret-guess-that-is-long-enough-for-hs256", algorithm="HS256", headers={"kid": "k1"}),
        "a key of the right kid, not the provider's": jwt.encode(
            {"iss": provider.issuer, "aud": "chat-agent", "sub": "m", "exp": now + 60}, stranger, algorithm="RS256",
            headers={"kid": "k1"}),
        "an unknown key": jwt.encode({"iss": provider.issuer, "aud": "chat-agent", "sub": "m", "exp": now + 60},
                                     unknown, algorithm="RS256", headers={"kid": "k-unknown"}),
        "tampered": good[:-8] + ("A" * 8 if not good.endswith("A" * 8) else "B" * 8),
        "no sub": provider.forge("k1", sub=None),
        "garbage": "eyJhbGciOi.not.a-token",
    }
    for why, token in bad.items():
        status, body = signin_server.get("/api/usage", token=token)
        assert (status, body["error"]["code"]) == (401, "unauthorized"), why
        await _refused_on_the_socket(signin_server, token)


async def test_a_rotation_of_the_provider_s_keys_is_picked_up(signin_server, provider):
    old = await provider.sign_in("alice")
    assert signin_server.get("/api/usage", token=old)[0] == 200
    provider.stop()
    provider.start("k2")  # new keys on the same issuer; k1 is gone
    new = await provider.sign_in("alice")
    assert jwt.get_unverified_header(new)["kid"] == "k2"
    assert signin_server.get("/api/usage", token=new)[1]["user"] == "alice"  # fetched again for the unknown kid
    ws, session = await connect(signin_server, token=new)
    assert session["type"] == "session"
    await ws.close()
    deadline = time.monotonic() + 10
    while signin_server.get("/api/usage", token=old)[0] != 401:  # k1 left the JWKS: once refetched, refused
        assert time.monotonic() < deadline, "a token of a removed key still signs in"
        time.sleep(0.3)


async def test_the_user_claim_is_configurable(make_server, provider):
    server = make_server(CHAT_AGENT_JWT_ISSUER=provider.issuer, CHAT_AGENT_JWT_AUDIENCE="chat-agent,admin-api",
                         CHAT_AGENT_JWT_USER_CLAIM="email")
    token = provider.forge("k1", sub="8f0c2", email="dana@example.com", aud="admin-api")
    assert server.get("/api/usage", token=token)[1]["user"] == "dana@example.com"
    assert server.get("/api/usage", token=provider.forge("k1", sub="8f0c2"))[0] == 401  # no email claim
    assert server.get("/health") == (200, {"status": "ok"})


def test_an_issuer_without_an_audience_does_not_start(tmp_path, fake_anthropic, fake_exa):
    from tests.conftest import server_env
    from tests.support import ServerProcess
    server = ServerProcess(tmp_path, server_env(fake_anthropic, fake_exa, CHAT_AGENT_JWT_ISSUER="https://id.example.com"))
    with pytest.raises(RuntimeError, match="CHAT_AGENT_JWT_AUDIENCE"):
        server.start()
    insecure = ServerProcess(tmp_path, server_env(fake_anthropic, fake_exa, CHAT_AGENT_JWT_ISSUER="http://id.example.com",
                                                  CHAT_AGENT_JWT_AUDIENCE="x"))
    with pytest.raises(RuntimeError, match="https"):
        insecure.start()
