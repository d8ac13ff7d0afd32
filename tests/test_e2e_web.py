"""The browser edge against the real server (PROTOCOL.md 1.1): which origins and hosts it
answers, CORS, one JSON shape for every HTTP error, and where it says it listens."""

from __future__ import annotations

import json
import resource
import socket
import sys
from pathlib import Path

import httpx
import pytest
import websockets

from tests import reaper
from tests.conftest import server_env
from tests.fakes.anthropic_fake import Reply, ToolUse
from tests.support import ROOT, ServerProcess, connect, send, until

EVIL = "http://evil.example"


def files_in(server: ServerProcess) -> list[Path]:
    root = server.data_dir / "files"
    return sorted(root.rglob("*")) if root.exists() else []


def error_of(response: httpx.Response) -> tuple[int, str]:
    assert response.headers["content-type"] == "application/json", response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"} and body["error"]["message"]
    return response.status_code, body["error"]["code"]


async def refused_handshake(url: str, **headers: str) -> tuple[int, dict]:
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(url, additional_headers=headers, compression=None)
    response = refused.value.response
    return response.status_code, json.loads(bytes(response.body))


def raw_handshake(server: ServerProcess, host: str) -> tuple[str, dict | None]:
    """A WebSocket handshake with exactly this Host header (the websockets client adds its own)."""
    request = (f"GET /api/chat-agent HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request.encode())
        answer = b""
        # a refusal ends with the connection; an accepted handshake with its headers
        while b"\r\n\r\n" not in answer or not answer.startswith(b"HTTP/1.1 101"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status = head.split(b"\r\n")[0].decode()
    if status.startswith("HTTP/1.1 101"):
        return status, None  # what follows the headers is WebSocket frames (the `session`), if any came yet
    return status, json.loads(body) if body.strip() else None


def upload(server: ServerProcess, data: bytes = b"notes", **headers: str) -> httpx.Response:
    return httpx.post(f"{server.http_url}/api/uploads", files={"file": ("a.txt", data, "text/plain")},
                      headers=headers, timeout=30)


# ---- origins and CORS ---------------------------------------------------------------------

async def test_pages_of_other_origins_cannot_drive_the_server(server):
    assert await refused_handshake(server.ws_url, Origin=EVIL) == (
        403, {"error": {"code": "forbidden_origin", "message": f"Pages from {EVIL} may not use this server "
                                                              "(CHAT_AGENT_ALLOWED_ORIGINS)."}})
    assert error_of(httpx.get(f"{server.http_url}/api/conversations", headers={"Origin": EVIL})) == (
        403, "forbidden_origin")
    before = files_in(server)
    assert error_of(upload(server, Origin=EVIL)) == (403, "forbidden_origin")
    assert files_in(server) == before  # nothing stored
    # local pages on any port, and clients that are not browsers, are served
    for origin in ("http://localhost:5173", "http://127.0.0.1:3000", "http://[::1]:8080"):
        ws, session = await connect(server, additional_headers={"Origin": origin})
        assert session["type"] == "session"
        await ws.close()
    assert httpx.get(f"{server.http_url}/api/conversations").status_code == 200


async def test_allowed_origins_get_cors(server):
    page = "http://localhost:3000"
    preflight = httpx.options(f"{server.http_url}/api/uploads", headers={
        "Origin": page, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"})
    assert preflight.status_code == 204 and preflight.content == b""
    assert preflight.headers["access-control-allow-origin"] == page
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    stored = upload(server, Origin=page)
    assert stored.status_code == 201 and stored.headers["access-control-allow-origin"] == page
    assert stored.json()["filename"] == "a.txt"
    assert error_of(httpx.options(f"{server.http_url}/api/uploads", headers={
        "Origin": EVIL, "Access-Control-Request-Method": "POST"})) == (403, "forbidden_origin")
    assert error_of(httpx.options(f"{server.http_url}/api/uploads", headers={
        "Origin": page, "Access-Control-Request-Method": "PATCH"})) == (400, "invalid_request")


# ---- hosts ----------------------------------------------------------------------------------

async def test_other_hosts_are_refused(server):
    url = f"{server.http_url}/api/conversations"
    refused = httpx.get(url, headers={"Host": f"evil.example:{server.port}"})
    assert error_of(refused) == (400, "invalid_request") and "evil.example" in refused.json()["error"]["message"]
    for host in (f"localhost:{server.port}", f"127.0.0.1:{server.port}", f"[::1]:{server.port}", "localhost"):
        assert httpx.get(url, headers={"Host": host}).status_code == 200, host
    status, body = raw_handshake(server, f"evil.example:{server.port}")
    assert status.startswith("HTTP/1.1 400") and body["error"]["code"] == "invalid_request"
    status, _ = raw_handshake(server, f"localhost:{server.port}")
    assert status.startswith("HTTP/1.1 101")


async def test_configured_origins_and_hosts_apply_with_auth_on(make_server):
    server = make_server(CHAT_AGENT_API_KEYS="ann:tok-ann", CHAT_AGENT_ALLOWED_ORIGINS="https://app.example.com",
                         CHAT_AGENT_ALLOWED_HOSTS="chat.example.com,127.0.0.1")
    url = server.ws_url + "?token=tok-ann"
    # a valid token does not make another origin's page welcome; the list replaces the defaults
    assert (await refused_handshake(url, Origin=EVIL))[0] == 403
    assert (await refused_handshake(url, Origin="http://localhost:5173"))[0] == 403
    ws, session = await connect(server, token="tok-ann", additional_headers={"Origin": "https://app.example.com"})
    assert session["type"] == "session"
    await ws.close()
    auth = {"Authorization": "Bearer tok-ann"}
    conversations = f"{server.http_url}/api/conversations"
    assert httpx.get(conversations, headers={**auth, "Host": "chat.example.com"}).status_code == 200
    assert error_of(httpx.get(conversations, headers={**auth, "Host": "localhost"})) == (400, "invalid_request")
    # a page served from the very host it calls (behind a proxy, say) is same-origin
    same = {**auth, "Host": "chat.example.com", "Origin": "https://chat.example.com"}
    assert httpx.get(conversations, headers=same).status_code == 200
    assert error_of(httpx.get(conversations, headers={"Origin": "https://app.example.com"})) == (401, "unauthorized")


# ---- HTTP errors ----------------------------------------------------------------------------

async def test_every_http_error_is_json_with_a_1_1_code(server, fake_anthropic):
    base = server.http_url
    assert error_of(httpx.get(f"{base}/api/nope")) == (404, "not_found")
    wrong = httpx.post(f"{base}/api/conversations")
    assert error_of(wrong) == (405, "method_not_allowed") and "GET" in wrong.headers["allow"]
    assert error_of(httpx.put(f"{base}/api/memories", json={"styleRules": "not a list"})) == (400, "invalid_request")
    assert error_of(httpx.put(f"{base}/api/memories", content=b"{not json")) == (400, "invalid_request")
    assert error_of(httpx.post(f"{base}/api/quick-actions", json={"title": "", "prompt": "x"})) == (
        400, "invalid_request")
    action = httpx.post(f"{base}/api/quick-actions", json={"title": "T", "prompt": "p"}).json()
    assert error_of(httpx.put(f"{base}/api/quick-actions/{action['id']}", json={"includePrefix": "no"})) == (
        400, "invalid_request")
    assert error_of(httpx.put(f"{base}/api/memories", json={"content": ["x" * 70_000]})) == (413, "too_large")

    ws, session = await connect(server)
    fake_anthropic.enqueue(Reply([ToolUse("generate_artifact", {"title": "Notes", "type": "text",
                                                                "content": "# Notes\n"})]), Reply("ok"))
    await send(ws, type="message", content="write")
    await until(ws, "done")
    await ws.close()
    export = f"{base}/api/conversations/{session['conversationId']}/artifact/export"
    assert error_of(httpx.get(export, params={"format": "pdf"})) == (400, "invalid_request")
    as_code = httpx.get(export, params={"format": "code"})
    assert error_of(as_code) == (400, "invalid_request") and "text" in as_code.json()["error"]["message"]
    assert httpx.get(export, params={"format": "md"}).text == "# Notes\n"


def _limit_file_size() -> None:
    # Past this size every write of the server fails, as on a full disk (EFBIG rather than
    # ENOSPC: the same OSError path, and no mount needed). Python ignores SIGXFSZ.
    resource.setrlimit(resource.RLIMIT_FSIZE, (512 * 1024, 512 * 1024))


def test_a_failed_upload_write_is_a_json_500_and_leaves_no_folder(tmp_path, fake_anthropic, fake_exa):
    server = ServerProcess(tmp_path / "data", server_env(fake_anthropic, fake_exa)).start(preexec_fn=_limit_file_size)
    try:
        failed = upload(server, b"x" * (768 * 1024))  # below the form parser's in-memory limit
        assert error_of(failed) == (500, "internal")
        assert files_in(server) == []  # neither the file, nor its temporary, nor its folder
        assert upload(server, b"small").status_code == 201  # the server carries on
        assert "Traceback" in server.log()  # the operator sees what the client was not told
    finally:
        server.close()


# ---- listening ------------------------------------------------------------------------------

def test_it_says_where_it_listens_and_a_taken_port_is_one_line(make_server, tmp_path):
    first = make_server(CHAT_AGENT_LOG_LEVEL="INFO")
    log = first.log()
    listening = f"listening on ws://127.0.0.1:{first.port}/api/chat-agent"
    assert listening in log and log.index("chat-agent ready") < log.index(listening)
    second = reaper.run([sys.executable, "server.py"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            env={**first.env, "CHAT_AGENT_DATA_DIR": str(tmp_path / "second")})
    output = (second.stdout + second.stderr).strip()
    assert second.returncode != 0
    assert output == f"chat-agent: cannot listen on 127.0.0.1:{first.port}: Address already in use"
    assert first.get("/health")[0] == 200  # the first is untouched
