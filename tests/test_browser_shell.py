"""The canvas page's shell in a real browser: the layout at a desktop's and a phone's size (with a
screenshot and an axe-core check of each main state), conversation addresses and the Back
button, the keyboard's way through the page, and the sidebar's search, rename and status dot."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.browser import PHONE, SCREENSHOTS, VIEWPORT, assert_accessible, no_problems
from tests.fakes.anthropic_fake import Reply, Text, ToolUse
from tests.test_browser_canvas import POEM, open_page, select_text, send

VIEWPORTS = {"desktop": VIEWPORT, "phone": PHONE}


def no_overflow(page) -> None:
    """Nothing wider than the viewport: no sideways scrolling."""
    width = page.viewport_size["width"]
    assert page.evaluate("document.documentElement.scrollWidth") <= width


def inside(page, selector: str) -> None:
    box = page.locator(selector).bounding_box()
    size = page.viewport_size
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= size["width"] + 0.5, (selector, box)
    assert box["y"] >= 0 and box["y"] + box["height"] <= size["height"] + 0.5, (selector, box)


def state(page, counts: dict, name: str, size: str) -> None:
    """One main state: no sideways scroll, axe-core clean, a screenshot."""
    no_overflow(page)
    counts[f"{name}@{size}"] = assert_accessible(page, name, viewports=(page.viewport_size,))
    page.screenshot(path=str(SCREENSHOTS / f"shell-{size}-{name}.png"))


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_main_states_at_desktop_and_phone_size(page, server, fake_anthropic, size):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size(VIEWPORTS[size])
    phone = size == "phone"
    counts: dict = {}
    open_page(page, server)
    state(page, counts, "empty", size)
    if phone:
        # one column: the chat first, the sidebar a drawer that the menu button opens
        expect(page.locator("#chat")).to_be_visible()
        expect(page.locator("#canvas")).to_be_hidden()
        expect(page.locator("#sidebar")).to_be_hidden()
        inside(page, "#clear-context")
        inside(page, "#send")

    fake_anthropic.enqueue(
        Reply([Text("Drafting."), ToolUse("generate_artifact", {"title": "Spring", "type": "text", "content": POEM})]),
        Reply("Here is your poem."))
    send(page, f"write a spring poem ({size})")
    expect(page.locator(".message.assistant .text").last).to_have_text("Here is your poem.")
    expect(page.locator("#stop")).to_be_hidden()
    state(page, counts, "reply", size)
    if phone:
        expect(page.locator("#tab-canvas")).to_have_class(re.compile(r"\bunseen\b"))  # the canvas has news
        page.click("#tab-canvas")
        expect(page.locator("#chat")).to_be_hidden()
        expect(page.locator("#tab-canvas")).not_to_have_class(re.compile(r"\bunseen\b"))
    expect(page.locator("#artifact-view .doc h1")).to_have_text("Spring")
    state(page, counts, "canvas", size)

    # the selection box: beside the selection, not over it, quoting the text as it reads
    select_text(page, "The ", "buds")
    expect(page.locator("#highlight-box")).to_be_visible()
    expect(page.locator("#highlight-quote")).to_have_text("The first buds")  # not "The **first** buds"
    chosen = page.evaluate("(() => { const r = getSelection().getRangeAt(0).getBoundingClientRect();"
                           " return {x: r.x, y: r.y, width: r.width, height: r.height}; })()")
    box = page.locator("#highlight-box").bounding_box()
    assert box["y"] >= chosen["y"] + chosen["height"] or box["y"] + box["height"] <= chosen["y"], (box, chosen)
    inside(page, "#highlight-box")
    state(page, counts, "selection", size)
    page.keyboard.press("Escape")
    page.mouse.click(5, page.viewport_size["height"] - 5)

    if phone:
        page.click("#open-drawer")
        expect(page.locator("#sidebar")).to_be_visible()
        expect(page.locator("#new-conversation")).to_be_focused()
        expect(page.locator("#conversation-list li.current")).to_be_visible()
        page.wait_for_function("() => document.querySelector('#sidebar').getBoundingClientRect().x >= 0")  # slid in
        inside(page, "#new-conversation")
        state(page, counts, "drawer", size)
        page.keyboard.press("Escape")
        expect(page.locator("#sidebar")).to_be_hidden()
        expect(page.locator("#open-drawer")).to_be_focused()
        page.click("#open-drawer")
    page.fill("#conversation-search", "spring poem")
    expect(page.locator("#conversation-list li .snippet").first).to_contain_text(re.compile("spring", re.I))
    state(page, counts, "search", size)
    page.fill("#conversation-search", "")
    page.click("#open-memories")  # (from the drawer, on a phone)
    expect(page.locator("#memories-dialog")).to_be_visible()
    state(page, counts, "memories", size)
    page.click("#memories-dialog button[value=cancel]")
    if phone:
        page.click("#close-drawer")
        expect(page.locator("#sidebar")).to_be_hidden()
    (SCREENSHOTS / f"shell-{size}-axe.json").write_text(json.dumps(counts, indent=1))
    print(f"\naxe-core violations by impact ({size}), screenshots in {SCREENSHOTS}:\n{json.dumps(counts)}")
    no_problems(page)


def test_each_conversation_has_an_address(page, server, fake_anthropic, browser):
    open_page(page, server)
    assert page.evaluate("location.pathname") == "/"
    fake_anthropic.enqueue(Reply("Noted: the ferry leaves at nine."))
    send(page, "The ferry leaves at nine.")
    expect(page.locator(".message.assistant .text").last).to_have_text("Noted: the ferry leaves at nine.")
    conversation = page.evaluate("window.chatAgent.connection.conversationId")
    expect(page).to_have_url(re.compile(f"/c/{conversation}$"))
    assert_accessible(page, "a conversation")

    # the address serves the page itself, under the page's own headers
    response = page.request.get(f"{server.http_url}/c/{conversation}")
    assert response.status == 200 and "default-src 'self'" in response.headers["content-security-policy"]
    assert '<main class="workspace"' in response.text()
    # its address opens it in a new tab (a new session: nothing in sessionStorage)
    other = page.context.new_page()
    other.goto(f"{server.http_url}/c/{conversation}")
    expect(other.locator(".message.user")).to_have_text("The ferry leaves at nine.")
    expect(other.locator("#conversation-list li.current")).to_have_count(1)
    other.close()

    # a new conversation is "/", and Back and Forward move between the two
    page.click("#new-conversation")
    expect(page).to_have_url(re.compile(r"/$"))
    expect(page.locator(".message")).to_have_count(0)
    page.go_back()
    expect(page).to_have_url(re.compile(f"/c/{conversation}$"))
    expect(page.locator(".message.user")).to_have_text("The ferry leaves at nine.")
    page.go_forward()
    expect(page).to_have_url(re.compile(r"/$"))
    expect(page.locator(".message")).to_have_count(0)

    # an address that names no conversation of this user's: said, and a new one instead
    page.goto(f"{server.http_url}/c/no-such-conversation")
    expect(page.locator(".toast.error", has_text="no longer exists")).to_be_visible()
    expect(page).to_have_url(re.compile(r"/$"))
    expect(page.locator("#connection")).to_have_text("connected")
    no_problems(page, allowed=("404",))


def test_keyboard_reaches_the_message_box_and_every_row_action(page, server, fake_anthropic):
    open_page(page, server)
    fake_anthropic.enqueue(Reply("About the lighthouse."))
    send(page, "Tell me about the lighthouse keeper.")
    expect(page.locator(".message.assistant .text").last).to_have_text("About the lighthouse.")
    conversation = page.evaluate("window.chatAgent.connection.conversationId")
    row = page.locator(f"#conversation-list li[data-id='{conversation}']")
    expect(row).to_be_visible()

    # the skip link is the first stop, and leads past the conversation list to the message box
    page.goto(f"{server.http_url}/c/{conversation}")
    expect(page.locator("#connection")).to_have_text("connected")
    page.keyboard.press("Tab")
    expect(page.locator("#skip-link")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#prompt")).to_be_focused()

    # rename, by keyboard: the row's ✎ is the next stop after its title
    row.locator(".open").focus()
    page.keyboard.press("Tab")
    expect(row.locator(".rename")).to_be_focused()
    expect(row.locator(".rename")).to_have_css("opacity", "1")
    page.keyboard.press("Enter")
    title = "Notes on the lighthouse keeper and the ferry"  # fits the bar: shown whole
    page.keyboard.press("Control+A")
    page.keyboard.type(title)
    page.keyboard.press("Enter")
    expect(row.locator(".title")).to_have_text(title)
    expect(page.locator("#conversation-title")).to_have_text(title)  # the `title` frame
    assert page.evaluate("(() => { const h = document.querySelector('#conversation-title');"
                         " return h.scrollWidth <= h.clientWidth; })()"), "the header cut a title that fits"
    status, body = server.get(f"/api/conversations/{conversation}")
    assert status == 200 and body["title"] == title
    # Escape leaves the title as it was
    row.locator(".rename").click()
    page.keyboard.type("something else")
    page.keyboard.press("Escape")
    expect(row.locator(".title")).to_have_text(title)

    # delete, by keyboard: the ✕ after the ✎
    row.locator(".rename").focus()
    page.keyboard.press("Tab")
    expect(row.locator(".delete")).to_be_focused()
    expect(row.locator(".delete")).to_have_attribute("aria-label", f"Delete “{title}”")
    page.once("dialog", lambda dialog: dialog.accept())
    page.keyboard.press("Enter")
    expect(row).to_have_count(0)
    expect(page).to_have_url(re.compile(r"/$"))
    assert server.get(f"/api/conversations/{conversation}")[0] == 404
    assert_accessible(page, "after a delete")
    no_problems(page)


def test_the_replying_dot_follows_the_turn(page, server, fake_anthropic):
    open_page(page, server)
    words = " ".join(f"w{n}" for n in range(80)) + " END"
    fake_anthropic.enqueue(Reply(words, chunk_size=4, delay=0.05))
    send(page, "Count slowly.")
    conversation = page.evaluate("window.chatAgent.connection.conversationId")
    row = page.locator(f"#conversation-list li[data-id='{conversation}']")
    dot = row.locator(".open .live")
    expect(dot).to_be_visible()  # inside the row's button: its layout holds
    expect(dot).to_have_attribute("aria-label", re.compile("replying|waiting"))
    assert_accessible(page, "a turn running")
    # another conversation opened meanwhile: the first one's dot stays while it replies, then goes
    page.click("#new-conversation")
    expect(dot).to_be_visible()
    expect(dot).to_have_count(0, timeout=30_000)
    status, body = server.get(f"/api/conversations/{conversation}")
    assert status == 200 and body["running"] is False
    # and back in it: the whole reply, no dot
    row.locator(".open").click()
    expect(page.locator(".message.assistant .text").last).to_contain_text("END")
    expect(dot).to_have_count(0)
    no_problems(page)
