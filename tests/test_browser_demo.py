"""The first run without a key: `server.py` with the demo model, in a browser, and the demo's
guard (a configured key wins over CHAT_AGENT_DEMO; only `--demo` overrides it)."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.browser import assert_accessible, no_problems
from tests.support import ServerProcess
from tests.test_browser_canvas import assistant, open_page, select_text, send

NO_KEYS = {"ANTHROPIC_API_KEY": "", "EXA_API_KEY": "", "CHAT_AGENT_DEMO": "1"}


def test_demo_model_in_the_page(page, tmp_path):
    server = ServerProcess(tmp_path / "demo", NO_KEYS).start()
    try:
        open_page(page, server)
        expect(page.locator("#demo-banner")).to_contain_text("Demo mode")
        send(page, "Write a short guide to brewing green tea")
        search = page.locator("details.tool[data-name=web_search]")
        expect(search.locator(".badge")).to_have_text(re.compile("done"))
        expect(search.locator(".tool-status")).to_have_text("Found 3 results")  # the canned pages
        expect(page.locator("#artifact-view .doc h1")).to_be_visible()
        expect(page.locator("#artifact-view .doc h2").last).to_have_text("Sources")  # from the search
        expect(page.locator("#stop")).to_be_hidden()
        expect(page.locator("#conversation-title")).not_to_have_text("New conversation")  # a title from the demo

        # a highlight edit and a quick action: forced tools the demo honours
        select_text(page, "Key points")
        page.fill("#highlight-input", "make it bold")
        page.press("#highlight-input", "Enter")
        expect(page.locator("#artifact-view .doc h2 strong")).to_have_text("Key points")
        expect(page.locator("#version-select")).to_have_value("2")
        expect(page.locator("#stop")).to_be_hidden()
        page.click("#quick-actions button:has-text('Emojis')")
        expect(page.locator("#version-select")).to_have_value("3")
        expect(page.locator("#artifact-view .doc h2").first).to_have_text(re.compile(r"^Why it matters \S+\s*$"))
        expect(page.locator("#artifact-view .doc h2 strong")).to_have_text("Key points")  # built on v2
        expect(page.locator("#stop")).to_be_hidden()
        assert_accessible(page)
        no_problems(page)
    finally:
        server.close()


def test_the_long_demo_reply_goes_on_after_a_reload_and_stops(page, tmp_path):
    """"Write a long story": long and slow enough to reload the page in the middle of it and
    see it carry on, then to press Stop."""
    server = ServerProcess(tmp_path / "demo", NO_KEYS).start()
    try:
        open_page(page, server)
        send(page, "Write a long story about a lighthouse")
        expect(assistant(page)).to_contain_text("Part 1")
        page.reload()
        reply = assistant(page)
        expect(reply).to_contain_text("A long story: lighthouse")  # the reply so far, from the session
        expect(page.locator("#stop")).to_be_visible()
        shown = len(reply.inner_text())
        page.wait_for_function("n => [...document.querySelectorAll('.message.assistant')].pop().innerText.length > n",
                               arg=shown)  # and the rest, live
        page.click("#stop")
        expect(page.locator("#stop")).to_be_hidden()
        expect(reply).to_contain_text("Stopped.")
        expect(reply).not_to_contain_text("The end")
        no_problems(page)
    finally:
        server.close()


def test_demo_needs_asking_when_a_key_is_set(tmp_path, fake_anthropic):
    with_key = {"ANTHROPIC_API_KEY": fake_anthropic.api_key, "ANTHROPIC_BASE_URL": fake_anthropic.base_url,
                "CHAT_AGENT_DEMO": "1"}
    server = ServerProcess(tmp_path / "a", with_key).start()
    try:
        status, health = server.get("/health")
        assert status == 200 and health["demo"] is False and health["model"] != "demo"
        assert "CHAT_AGENT_DEMO is ignored" in server.log()
    finally:
        server.close()
    # `--demo` on the command line is the explicit ask
    demo = ServerProcess(tmp_path / "b", with_key, args=("--demo",)).start()
    try:
        status, health = demo.get("/health")
        assert status == 200 and health["demo"] is True and health["model"] == "demo"
        assert not fake_anthropic.requests or all(r.body.get("model") != "demo" for r in fake_anthropic.requests)
    finally:
        demo.close()
