"""The canvas page in a real browser (Chromium, headless) against the real server and the fake
Anthropic API: what a user does, and what the page shows. Screenshots: tests/browser.py."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from PIL import Image
from playwright.sync_api import expect

from tests.browser import assert_accessible, no_problems
from tests.fakes.anthropic_fake import Reply, Text, ToolUse

POEM = ("# Spring\n\nThe **first** buds open under a pale sky.\n\n- rain\n- sun\n\n"
        "And the birds return to the old oak, one by one, singing.\n")


def open_page(page, server) -> None:
    page.goto(server.http_url + "/")
    expect(page.locator("#connection")).to_have_text("connected")


def send(page, text: str) -> None:
    page.fill("#prompt", text)
    page.press("#prompt", "Enter")


def assistant(page):
    return page.locator(".message.assistant").last


def select_text(page, text: str, last: str | None = None) -> None:
    """Selects the first occurrence of `text` in the rendered artifact (or, with `last`, from
    its start to the end of the next `last`, across markup), as a user's drag would, and
    releases the mouse there."""
    box = page.evaluate("""([first, last]) => {
        const view = document.querySelector('#artifact-view');
        const walker = document.createTreeWalker(view, NodeFilter.SHOW_TEXT);
        const range = document.createRange();
        let started = false;
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            let from = 0;
            if (!started && node.data.includes(first)) {
                from = node.data.indexOf(first);
                range.setStart(node, from);
                started = true;
            }
            if (started && node.data.indexOf(last, from) >= 0) {
                range.setEnd(node, node.data.indexOf(last, from) + last.length);
                const selection = getSelection();
                selection.removeAllRanges();
                selection.addRange(range);
                const r = range.getBoundingClientRect();
                return {x: r.right - 1, y: r.top + r.height / 2};
            }
        }
        return null;
    }""", [text, last or text])
    assert box, f"{text!r} is not in the artifact"
    page.mouse.move(box["x"], box["y"])
    page.mouse.up()


def test_chat_streams_shows_tool_cards_and_aborts(page, server, fake_anthropic, exa):
    open_page(page, server)
    expect(page.locator("#demo-banner")).to_be_hidden()
    fake_anthropic.enqueue(
        Reply([Text("Let me search for that."), ToolUse("web_search", {"query": "green tea history"})],
              chunk_size=4, delay=0.03),
        Reply("Green tea came from **China** and spread along the trade routes.", chunk_size=3, delay=0.05))
    send(page, "Where does green tea come from?")
    expect(page.locator(".message.user").last).to_have_text("Where does green tea come from?")
    card = page.locator("details.tool[data-name=web_search]")
    expect(card).to_have_class(re.compile(r"\bdone\b"))
    expect(card.locator(".badge")).to_contain_text("done")
    card.locator("summary").click()  # collapsible: the output is inside
    expect(card.locator("pre.output")).to_contain_text("green tea history")
    # the reply streams in: seen part-way, then whole, rendered as Markdown
    reply = page.locator(".message.assistant .text").last.last
    expect(reply).to_contain_text("Green tea")
    expect(reply.locator("strong")).to_have_text("China")
    expect(reply).to_contain_text("trade routes.")
    expect(page.locator("#stop")).to_be_hidden()
    expect(page.locator("#token-text")).not_to_have_text(re.compile(r"^0 "))
    assert exa.requests and exa.requests[-1].body["query"] == "green tea history"

    # abort: the stop button ends a reply that is still streaming; what came stays, marked
    fake_anthropic.enqueue(Reply("word " * 400, chunk_size=5, delay=0.05))
    send(page, "Tell me everything.")
    expect(page.locator(".message.assistant .text").last).to_contain_text("word word")
    expect(page.locator("#stop")).to_be_visible()
    page.click("#stop")
    expect(assistant(page).locator(".note")).to_have_text("Stopped.")
    expect(page.locator("#stop")).to_be_hidden()
    expect(page.locator("#send")).to_be_enabled()
    # the conversation is listed (by its title once the background call named it)
    expect(page.locator("#conversation-list li.current")).to_have_count(1)
    assert_accessible(page)
    no_problems(page)


def test_canvas_live_highlight_quick_action_versions_edit_export(page, server, fake_anthropic, tmp_path):
    open_page(page, server)
    fake_anthropic.enqueue(
        Reply([Text("Drafting."), ToolUse("generate_artifact", {"title": "Spring", "type": "text", "content": POEM})],
              chunk_size=6, delay=0.05),
        Reply("Here is your poem."))
    send(page, "write a spring poem")
    # the artifact fills in while the model writes it, before the call completes
    expect(page.locator("#artifact-view.writing")).to_be_visible()
    expect(page.locator("#artifact-view.writing")).to_contain_text("Spring")
    expect(page.locator("#artifact-view .doc h1")).to_have_text("Spring")
    expect(page.locator("#artifact-view.writing")).to_have_count(0)
    expect(page.locator("#artifact-view .doc li")).to_have_count(2)
    expect(page.locator("#version-select")).to_have_value("1")
    expect(page.locator("#stop")).to_be_hidden()

    # highlight: select rendered text, ask; the edit replaces exactly that span
    fake_anthropic.enqueue(Reply([ToolUse("update_artifact", {"replacement": "earliest"})], chunk_size=2, delay=0.05),
                           Reply("Changed it."))
    select_text(page, "first")
    expect(page.locator("#highlight-box")).to_be_visible()
    expect(page.locator("#highlight-quote")).to_have_text("first")
    assert_accessible(page, "the highlight box")
    page.fill("#highlight-input", "a stronger word")
    page.press("#highlight-input", "Enter")
    expect(page.locator("#artifact-view .doc strong")).to_have_text("earliest")
    expect(page.locator("#version-select option")).to_have_count(2)
    expect(page.locator("#version-select")).to_have_value("2")
    forced = [b for b in fake_anthropic.main_bodies if b.get("tool_choice")][-1]
    assert forced["tool_choice"] == {"type": "tool", "name": "update_artifact"}
    assert "<highlight>first</highlight>" in json.dumps(forced["messages"])
    expect(page.locator("#stop")).to_be_hidden()

    # a quick action: forces rewrite_artifact; the new version arrives as an edit
    v3 = POEM.replace("- rain", "- rain 🌧").replace("earliest", "earliest").replace("first", "earliest")
    fake_anthropic.enqueue(Reply([ToolUse("rewrite_artifact", {"content": v3})]), Reply("Added emojis."))
    page.click("#quick-actions button:has-text('Emojis')")
    expect(page.locator("#artifact-view .doc li").first).to_have_text("rain 🌧")
    expect(page.locator("#version-select")).to_have_value("3")
    forced = [b for b in fake_anthropic.main_bodies if b.get("tool_choice")][-1]
    assert forced["tool_choice"] == {"type": "tool", "name": "rewrite_artifact"}
    expect(page.locator("#stop")).to_be_hidden()

    # version switch: back to the first one, then forward again
    page.select_option("#version-select", "1")
    expect(page.locator("#artifact-view .doc strong")).to_have_text("first")
    page.click("#version-next")
    expect(page.locator("#artifact-view .doc strong")).to_have_text("earliest")
    expect(page.locator("#version-select")).to_have_value("2")

    # the user's own edit: a new, last version
    page.click("#edit-artifact")
    page.fill("#editor-title", "Spring, edited")
    page.fill("#editor-content", "# Spring\n\nMy own words now.\n")
    assert_accessible(page, "the editor")
    page.click("#editor-save")
    # the old version's two paragraphs give way to the edit's one (asked so, not as "the <p>":
    # while the old version still shows, that would be two elements, which Playwright refuses)
    expect(page.locator("#artifact-view .doc p")).to_have_count(1)
    expect(page.locator("#artifact-view .doc p")).to_have_text("My own words now.")
    expect(page.locator("#artifact-title")).to_have_text("Spring, edited")
    expect(page.locator("#version-select option")).to_have_count(4)
    expect(page.locator("#version-select")).to_have_value("4")

    # a custom quick action made in its dialog shows up in the bar
    page.click("#open-actions")
    page.fill("#action-title", "Make it formal")
    page.fill("#action-prompt", "Rewrite the artifact in a formal register.")
    page.click("#action-save")
    expect(page.locator("#actions-list li")).to_have_text(re.compile("Make it formal"))
    assert_accessible(page, "the quick actions dialog")
    page.keyboard.press("Escape")
    expect(page.locator("#quick-actions button.custom")).to_have_text("Make it formal")

    # export: the download is the current version
    page.click("#export-button")
    with page.expect_download() as caught:
        page.click("#export-menu [data-format=md]")
    download = caught.value
    assert download.suggested_filename.endswith(".md")
    saved = tmp_path / download.suggested_filename
    download.save_as(saved)
    assert "My own words now." in saved.read_text()
    assert_accessible(page)
    no_problems(page)


def test_upload_image_and_drop(page, server, fake_anthropic):
    open_page(page, server)
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), (220, 30, 30)).save(buffer, "PNG")
    page.set_input_files("#file-input", files=[{"name": "red.png", "mimeType": "image/png", "buffer": buffer.getvalue()}])
    expect(page.locator(".attachment.uploaded")).to_have_count(1)
    fake_anthropic.enqueue(Reply("A red rectangle."))
    send(page, "What is in this picture?")
    thumb = page.locator(".message.user img").last
    expect(thumb).to_be_visible()
    expect(page.locator(".message.assistant .text").last).to_have_text("A red rectangle.")
    sent = json.dumps(fake_anthropic.last_main["messages"])
    assert '"type": "image"' in sent

    # dropped files upload too (a DataTransfer with a file, as a drag from the desktop makes)
    page.evaluate("""() => {
        const transfer = new DataTransfer();
        transfer.items.add(new File(['a,b\\n1,2\\n'], 'table.csv', {type: 'text/csv'}));
        const zone = document.querySelector('#chat');
        zone.dispatchEvent(new DragEvent('dragenter', {dataTransfer: transfer, bubbles: true}));
        zone.dispatchEvent(new DragEvent('drop', {dataTransfer: transfer, bubbles: true}));
    }""")
    expect(page.locator(".attachment.uploaded")).to_have_count(1)
    expect(page.locator(".attachment")).to_contain_text("table.csv")
    # after a reload the picture is still in the history, served to its owner
    page.reload()
    expect(page.locator(".message.user img")).to_have_count(1)
    # (it loads after the history shows: waited for, not raced)
    page.wait_for_function("() => document.querySelector('.message.user img').complete")
    assert page.evaluate("document.querySelector('.message.user img').naturalWidth") == 64
    assert_accessible(page)
    no_problems(page)


def test_reload_mid_turn_continues(page, server, fake_anthropic):
    open_page(page, server)
    words = " ".join(f"w{n}" for n in range(120)) + " THE END"
    fake_anthropic.enqueue(Reply(words, chunk_size=6, delay=0.04))
    send(page, "Count for me.")
    expect(page.locator(".message.assistant .text").last).to_contain_text("w5 ")
    conversation = page.evaluate("window.chatAgent.connection.conversationId")
    page.reload()
    expect(page.locator("#connection")).to_have_text("connected")
    # the same conversation, with the reply so far, still growing, then finished
    assert page.evaluate("window.chatAgent.connection.conversationId") == conversation
    assert page.url.endswith(f"/c/{conversation}")
    expect(page.locator(".message.user")).to_have_text("Count for me.")
    expect(page.locator("#stop")).to_be_visible()
    expect(page.locator(".message.assistant .text").last).to_contain_text("THE END", timeout=20_000)
    expect(page.locator("#stop")).to_be_hidden()
    assert page.locator(".message.assistant .text").last.inner_text().replace("\n", " ").split() == words.split()

    # a dropped socket: the page reconnects and resumes where it was
    fake_anthropic.enqueue(Reply(" ".join(f"x{n}" for n in range(60)) + " DONE", chunk_size=6, delay=0.04))
    send(page, "Again.")
    expect(page.locator(".message.assistant .text").last).to_contain_text("x3 ")
    page.evaluate("window.__dropped = true; window.chatAgent.connection.ws.close()")
    expect(page.locator("#connection")).to_have_text(re.compile("reconnecting|connecting"))
    expect(page.locator(".message.assistant .text").last).to_contain_text("DONE", timeout=20_000)
    assert page.evaluate("window.__dropped") is True  # the same page, not a reload
    text = page.locator(".message.assistant .text").last.inner_text().replace("\n", " ").split()
    assert text == [f"x{n}" for n in range(60)] + ["DONE"], text  # nothing lost, nothing twice
    assert_accessible(page)
    no_problems(page)


def test_auth_token_prompt(page, make_server, fake_anthropic):
    server = make_server(CHAT_AGENT_API_KEYS="alice:alice-secret-token")
    page.goto(server.http_url + "/")
    dialog = page.locator("#token-dialog")
    expect(dialog).to_be_visible()
    assert_accessible(page, "the token dialog")
    page.fill("#token-input", "wrong-token")
    page.click("#token-form button")
    expect(page.locator("#token-error")).to_be_visible()
    page.fill("#token-input", "alice-secret-token")
    page.click("#token-form button")
    expect(page.locator("#connection")).to_have_text("connected")
    fake_anthropic.enqueue(Reply("Hello, Alice."))
    send(page, "Hi")
    expect(page.locator(".message.assistant .text").last).to_have_text("Hello, Alice.")
    # kept in the page's storage: a reload asks nothing
    page.reload()
    expect(page.locator("#connection")).to_have_text("connected")
    expect(dialog).to_be_hidden()
    expect(page.locator(".message.user")).to_have_text("Hi")
    status, body = server.get("/api/conversations", token="alice-secret-token")
    assert status == 200 and len(body["conversations"]) == 1
    assert_accessible(page)
    no_problems(page, allowed=("401",))


def test_tool_approval_cards(page, make_server, fake_anthropic, exa):
    """A tool that needs approval shows a card; approving runs it, declining (with a note)
    tells the model, and the reply goes on either way."""
    server = make_server(CHAT_AGENT_REQUIRE_APPROVAL="web_search")
    open_page(page, server)
    fake_anthropic.enqueue(Reply([ToolUse("web_search", {"query": "tea harvest"})]), Reply("Harvest is in spring."))
    send(page, "When is tea harvested?")
    approval = page.locator(".approval")
    expect(approval).to_contain_text("web_search")
    expect(approval.locator("pre")).to_contain_text("tea harvest")
    assert_accessible(page, "an approval card")
    approval.locator("button.approve").click()
    expect(approval).to_have_count(0)
    card = page.locator("details.tool[data-name=web_search]").last
    expect(card).to_have_class(re.compile(r"\bdone\b"))
    expect(assistant(page)).to_contain_text("Harvest is in spring.")

    fake_anthropic.enqueue(Reply([ToolUse("web_search", {"query": "tea prices"})]), Reply("Fine, no search."))
    send(page, "And the prices?")
    expect(approval).to_have_count(1)
    approval.locator(".approval-message").fill("too expensive")
    approval.locator("button.decline").click()
    expect(assistant(page)).to_contain_text("Fine, no search.")
    card = page.locator("details.tool[data-name=web_search]").last
    card.locator("summary").click()
    expect(card).to_contain_text("too expensive")
    sent = [b for m in fake_anthropic.last_main.body["messages"] if isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_result"][-1]
    assert sent["is_error"] and "too expensive" in str(sent["content"])
