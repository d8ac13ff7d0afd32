"""The chat column's own controls in Chromium, against the real server and the fake Anthropic
API: the model picker (`session.models` → `settings.model`), a reply's copy button,
regenerate, edit and resend, the `‹ n/m ›` arrows between branches (PROTOCOL 1.2 trees; the
canvas follows the branch), and a line in the chat for the user's own edit of the artifact."""

from __future__ import annotations

import io
import json
import re

from PIL import Image
from playwright.sync_api import expect

from tests.browser import SCREENSHOTS, assert_accessible, no_problems
from tests.fakes.anthropic_fake import Reply, Text, ToolUse
from tests.test_browser_canvas import assistant, open_page, send


def seen(page, state: str) -> None:
    """The state as a screenshot (test-artifacts/screenshots) and checked by axe at both sizes."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"chat-{state}.png"))
    assert_accessible(page, state)

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1400, "height": 900}


def artifact(title: str, content: str) -> ToolUse:
    return ToolUse("generate_artifact", {"title": title, "type": "text", "content": content})


def idle(page) -> None:
    expect(page.locator("#stop")).to_be_hidden()


def test_model_picker_copy_regenerate_and_branch_arrows(page, make_server, fake_anthropic):
    server = make_server(CHAT_AGENT_ALLOWED_MODELS="claude-sonnet-4-6,claude-opus-test")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.http_url)
    open_page(page, server)
    picker = page.get_by_label("Model")
    expect(picker).to_be_visible()
    expect(picker.locator("option")).to_have_text(["claude-sonnet-4-6 (default)", "claude-opus-test"])
    picker.select_option("claude-opus-test")

    fake_anthropic.enqueue(Reply("First **answer**."))
    send(page, "Say something")
    expect(assistant(page).locator(".text")).to_have_text("First answer.")
    idle(page)
    assert fake_anthropic.main_bodies[-1]["model"] == "claude-opus-test"

    # Copy: the reply's Markdown on the clipboard, the button says so for a moment.
    copy = assistant(page).get_by_role("button", name="Copy the reply")
    copy.click()
    expect(assistant(page).locator("button.copy.copied")).to_have_count(1)
    assert page.evaluate("navigator.clipboard.readText()") == "First **answer**."

    # Regenerate: a second reply to the same message, with the model still chosen; arrows 2/2.
    fake_anthropic.enqueue(Reply("Second answer."))
    assistant(page).get_by_role("button", name="Regenerate the reply").click()
    expect(assistant(page).locator(".text")).to_have_text("Second answer.")
    idle(page)
    expect(page.locator(".message.assistant")).to_have_count(1)
    expect(page.locator(".message.user")).to_have_count(1)
    expect(assistant(page).locator(".branch-place")).to_have_text("2/2")
    assert fake_anthropic.main_bodies[-1]["model"] == "claude-opus-test"
    assert "First" not in str(fake_anthropic.main_bodies[-1]["messages"])  # the model never sees the other branch

    # ‹ shows the first reply again, › the second; the copy button copies the one shown.
    assistant(page).get_by_role("button", name=re.compile("^Previous version")).click()
    expect(assistant(page).locator(".text")).to_have_text("First answer.")
    expect(assistant(page).locator(".branch-place")).to_have_text("1/2")
    expect(assistant(page).get_by_role("button", name=re.compile("^Previous version"))).to_be_disabled()
    assistant(page).get_by_role("button", name=re.compile("^Next version")).click()
    expect(assistant(page).locator(".text")).to_have_text("Second answer.")

    # A reload shows the same path and places, from the stored tree.
    page.reload()
    expect(page.locator("#connection")).to_have_text("connected")
    expect(assistant(page).locator(".text")).to_have_text("Second answer.")
    expect(assistant(page).locator(".branch-place")).to_have_text("2/2")
    expect(page.get_by_label("Model")).to_have_value("claude-opus-test")  # the choice is kept
    expect(page.locator("#send")).to_be_in_viewport()  # the picker does not push Send out of the box
    page.set_viewport_size(PHONE)  # on a phone: all of it still there, within the column
    for control in (page.get_by_label("Model"), page.locator("#send"), assistant(page).locator(".message-actions")):
        control.scroll_into_view_if_needed()
        expect(control).to_be_in_viewport()
    seen(page, "branch-arrows")
    no_problems(page)


def test_one_model_no_picker_and_no_model_sent(page, make_server, fake_anthropic):
    server = make_server(CHAT_AGENT_ALLOWED_MODELS="claude-sonnet-4-6")
    open_page(page, server)
    expect(page.locator("#opt-model")).to_be_hidden()
    fake_anthropic.enqueue(Reply("Hello."))
    send(page, "Hi")
    expect(assistant(page).locator(".text")).to_have_text("Hello.")
    assert fake_anthropic.main_bodies[-1]["model"] == "claude-sonnet-4-6"
    seen(page, "one-model")
    no_problems(page)


def test_edit_and_resend_on_a_phone_the_canvas_follows_the_branch(page, server, fake_anthropic):
    page.set_viewport_size(PHONE)
    open_page(page, server)
    fake_anthropic.enqueue(Reply([ToolUse("generate_artifact", {"title": "Poem", "type": "text",
                                                                "content": "Roses are red."})]),
                           Reply("Here is a poem."))
    send(page, "Write a poem")
    expect(assistant(page).locator(".text")).to_have_text("Here is a poem.")
    idle(page)
    expect(page.locator("#artifact-title")).to_have_text("Poem")

    user = page.locator(".message.user").last
    user.get_by_role("button", name="Edit and resend").click()
    box = user.get_by_label("Your message, edited")
    expect(box).to_have_value("Write a poem")
    fake_anthropic.enqueue(Reply([ToolUse("rewrite_artifact", {"title": "Haiku", "content": "Old pond, a frog."})]),
                           Reply("Here is a haiku."))
    box.fill("Write a haiku")
    user.get_by_role("button", name="Send").click()
    expect(assistant(page).locator(".text")).to_have_text("Here is a haiku.")
    idle(page)
    expect(page.locator(".message.user")).to_have_count(1)
    expect(page.locator(".message.user .user-text")).to_have_text("Write a haiku")
    expect(page.locator(".message.user .branch-place")).to_have_text("2/2")
    expect(page.locator("#artifact-title")).to_have_text("Haiku")
    assert "Write a poem" not in str(fake_anthropic.main_bodies[-1]["messages"])

    # The first branch again: its message, its reply, and the artifact as that reply left it.
    page.locator(".message.user").get_by_role("button", name=re.compile("^Previous version")).click()
    expect(page.locator(".message.user .user-text")).to_have_text("Write a poem")
    expect(assistant(page).locator(".text")).to_have_text("Here is a poem.")
    expect(page.locator("#artifact-title")).to_have_text("Poem")
    expect(page.locator("#version-select")).to_have_value("1")
    expect(page.locator(".message.user .branch-place")).to_have_text("1/2")
    page.set_viewport_size(DESKTOP)
    expect(page.locator(".message.user").get_by_role("button", name=re.compile("^Next version"))).to_be_in_viewport()
    seen(page, "edit-and-resend")
    no_problems(page)


def test_the_users_own_edit_is_a_line_in_the_chat(page, server, fake_anthropic):
    open_page(page, server)
    fake_anthropic.enqueue(Reply([Text("Drafting."), artifact("Notes", "First line.")]), Reply("Done."))
    send(page, "Write notes")
    expect(assistant(page).locator(".text").last).to_have_text("Done.")
    idle(page)

    page.click("#edit-artifact")
    page.fill("#editor-content", "First line.\n\nMy own second line.")
    page.click("#editor-save")
    line = page.locator(".user-edit")
    expect(line).to_have_text(re.compile(r"^You edited the document \(v2\)"))
    expect(page.locator("#version-select")).to_have_value("2")

    # The next turn comes after it; after a reload it is still between the two.
    fake_anthropic.enqueue(Reply("I see your edit."))
    send(page, "What changed?")
    expect(page.locator(".message.assistant .text").last).to_have_text("I see your edit.")
    idle(page)
    page.reload()
    expect(page.locator("#connection")).to_have_text("connected")
    expect(page.locator(".user-edit")).to_have_count(1)
    order = page.eval_on_selector_all("#messages > *:not(.empty)", "nodes => nodes.map(n => n.className)")
    assert [c.split()[0:2] for c in order] == [["message", "user"], ["message", "assistant"], ["user-edit"],
                                               ["message", "user"], ["message", "assistant"]], order
    # Its button shows that version in the canvas, also when clicked before the server has
    # answered the pick of v1 (the select shows v1 at once; the canvas still shows v2).
    page.select_option("#version-select", "1")
    page.get_by_role("button", name="Show version 2 of the artifact").click()
    expect(page.locator("#version-select")).to_have_value("2")
    expect(page.locator("#artifact-view")).to_have_attribute("data-index", "2")
    expect(page.locator("#artifact-view")).to_contain_text("My own second line.")
    page.set_viewport_size(PHONE)
    line.scroll_into_view_if_needed()
    expect(line).to_be_in_viewport()
    seen(page, "own-edit-line")
    no_problems(page)


def test_the_latest_plan_stays_in_sight_on_a_phone(page, server, fake_anthropic):
    page.set_viewport_size(PHONE)
    open_page(page, server)
    steps = lambda *s: {"steps": [{"title": t, "status": x} for t, x in zip(("Outline", "Draft"), s)]}  # noqa: E731
    fake_anthropic.enqueue(Reply([Text("Planning."), ToolUse("update_plan", steps("in_progress", "pending"))]),
                           Reply([ToolUse("update_plan", steps("done", "in_progress"))]), Reply("Half way."))
    send(page, "Plan a note")
    bar = page.get_by_role("group", name="The assistant's plan")
    expect(bar.locator("summary")).to_have_text("Plan: 1 of 2 done · Draft")
    expect(page.locator(".message.assistant .text").last).to_have_text("Half way.")
    idle(page)
    bar.locator("summary").click()
    expect(bar.get_by_role("listitem", name="Outline (done)")).to_be_visible()
    expect(bar.get_by_role("listitem", name="Draft (in progress)")).to_be_visible()

    page.reload()  # from session.plan
    expect(page.locator("#connection")).to_have_text("connected")
    expect(page.locator(".plan-bar summary")).to_have_text("Plan: 1 of 2 done · Draft")

    fake_anthropic.enqueue(Reply("Just a chat."))
    send(page, "Thanks")
    expect(page.locator(".message.assistant .text").last).to_have_text("Just a chat.")
    expect(page.locator(".plan-bar")).to_be_hidden()
    page.reload()  # the last turn kept no plan
    expect(page.locator("#connection")).to_have_text("connected")
    expect(page.locator(".plan-bar")).to_be_hidden()
    seen(page, "plan-bar")
    no_problems(page)


def test_an_edited_message_is_sent_again_with_its_picture(page, server, fake_anthropic):
    open_page(page, server)
    buffer = io.BytesIO()
    Image.new("RGB", (40, 30), (30, 160, 60)).save(buffer, "PNG")
    page.set_input_files("#file-input", files=[{"name": "green.png", "mimeType": "image/png", "buffer": buffer.getvalue()}])
    expect(page.locator(".attachment.uploaded")).to_have_count(1)
    fake_anthropic.enqueue(Reply("A green box."))
    send(page, "What is this?")
    expect(page.locator(".message.assistant .text").last).to_have_text("A green box.")
    idle(page)

    user = page.locator(".message.user").last
    user.get_by_role("button", name="Edit and resend").click()  # right away: the page's own copy of the message
    expect(user.locator(".edit-note")).to_have_text("Sent again with its attachment")
    fake_anthropic.enqueue(Reply("A small green rectangle."))
    user.get_by_label("Your message, edited").fill("What colour is this?")
    user.get_by_role("button", name="Send").click()
    expect(page.locator(".message.assistant .text").last).to_have_text("A small green rectangle.")
    expect(page.locator(".message.user img")).to_have_count(1)
    last = fake_anthropic.main_bodies[-1]["messages"]
    assert '"type": "image"' in json.dumps(last) and "What is this?" not in json.dumps(last)

    page.reload()  # from the stored message: its parts name the file
    expect(page.locator("#connection")).to_have_text("connected")
    page.locator(".message.user").get_by_role("button", name="Edit and resend").click()
    expect(page.locator(".message.user .edit-note")).to_have_text("Sent again with its attachment")
    seen(page, "edit-with-picture")
    no_problems(page)
