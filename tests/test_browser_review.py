"""The canvas page shows plans and reviews (PROTOCOL 1.2), in Chromium against the real
server and the fake Anthropic API: an `update_plan` card is a checklist, a review shows its
score and feedback, a question has decision buttons that answer it, and all of it is there
again after a reload."""

from __future__ import annotations

import json
import re

from playwright.sync_api import expect

from tests.browser import assert_accessible, no_problems
from tests.fakes.anthropic_fake import Reply, Text, ToolUse, Verdict
from tests.fakes.anthropic_script import is_review
from tests.test_browser_canvas import assistant, open_page, send


def plan(*statuses: str) -> dict:
    titles = ("Outline the note", "Draft it in the canvas", "Check the conclusion")
    return {"steps": [{"title": t, "status": s} for t, s in zip(titles, statuses)]}


def test_plan_checklist_and_review_decisions(page, make_server, fake_anthropic):
    server = make_server(CHAT_AGENT_REVIEW="ask")
    open_page(page, server)
    fake_anthropic.verdicts(Verdict(False, 0.3, "The note has no conclusion.", ["Add a one-line conclusion"]),
                            Verdict(True, 0.9, "It concludes now."))
    fake_anthropic.enqueue(
        Reply([Text("Here is my plan."), ToolUse("update_plan", plan("in_progress", "pending", "pending"))]),
        Reply([ToolUse("generate_artifact", {"title": "Tides", "type": "text", "content": "Tides rise and fall."}),
               ToolUse("update_plan", plan("done", "done", "in_progress"))]),
        Reply("Drafted."),
        Reply([ToolUse("rewrite_artifact", {"content": "Tides rise and fall.\n\nCheck the table first."})]),
        Reply("Added a conclusion."))
    send(page, "Write a note on tides")

    # The plan: the latest card is an open checklist, the earlier one folded away.
    cards = page.locator("details.tool.plan")
    expect(cards).to_have_count(2)
    latest = cards.last
    expect(latest).to_have_attribute("open", "")
    expect(latest.locator(".plan-step")).to_have_count(3)
    expect(latest.locator(".plan-step.done")).to_have_count(2)
    expect(latest.locator(".plan-step.in_progress")).to_have_text(re.compile("Check the conclusion"))
    expect(latest.locator(".tool-status")).to_have_text("Plan: 2 of 3 done")
    expect(cards.first).not_to_have_attribute("open", "")

    # The failed review asks: score, feedback, suggestions and the decision buttons.
    failed = page.locator(".review.failed")
    expect(failed.locator(".review-score")).to_have_text("30%")
    expect(failed.locator(".review-feedback")).to_have_text("The note has no conclusion.")
    expect(failed.locator(".review-suggestions li")).to_have_text(["Add a one-line conclusion"])
    expect(failed.locator(".review-what")).to_have_text("version 1")
    assert_accessible(page, "a plan and a review question")
    failed.locator(".review-message").fill("keep it short")
    failed.locator("button.revise").click()

    passed = page.locator(".review.passed")
    expect(passed.locator(".review-score")).to_have_text("90%")
    expect(passed.locator(".review-what")).to_contain_text("revision 1")
    expect(failed.locator(".review-ask")).to_have_count(0)
    expect(failed.locator(".review-decision")).to_have_text("You asked for a revision.")
    expect(assistant(page)).to_contain_text("Added a conclusion.")
    expect(page.locator("#stop")).to_be_hidden()
    expect(page.locator("#version-select")).to_have_value("2")
    assert "keep it short" in json.dumps(fake_anthropic.main_bodies[-2]["messages"][-1])

    # After a reload the reply shows the same plan and reviews, read from the stored parts.
    page.reload()
    expect(page.locator("#connection")).to_have_text("connected")
    expect(page.locator(".review")).to_have_count(2)
    expect(page.locator(".review.failed .review-decision")).to_have_text("You asked for a revision.")
    expect(page.locator("details.tool.plan").last.locator(".plan-step.done")).to_have_count(2)
    assert_accessible(page)
    no_problems(page)


def test_a_question_open_on_reload_can_be_accepted(page, make_server, fake_anthropic):
    server = make_server()  # reviews off by default: the page's Review toggle asks for one
    open_page(page, server)
    page.check("#opt-review")
    fake_anthropic.verdicts(Verdict(False, 0.4, "Too plain."))
    fake_anthropic.enqueue(Reply([ToolUse("generate_artifact", {"title": "Sea", "type": "text", "content": "Waves."})]),
                           Reply("Drafted."))
    before = len(fake_anthropic.requests)
    send(page, "Write about the sea")
    expect(page.locator(".review.failed .review-ask button.accept")).to_be_visible()
    asked = [r.body for r in fake_anthropic.requests[before:] if is_review(r.body)]
    assert len(asked) == 1 and "Write about the sea" in json.dumps(asked[0]["messages"])
    page.reload()  # the question is still open, from session.pendingReviews
    expect(page.locator("#connection")).to_have_text("connected")
    accept = page.locator(".review.failed .review-ask button.accept")
    expect(accept).to_be_visible()
    accept.click()
    expect(page.locator(".review.failed .review-decision")).to_have_text("You accepted it.")
    expect(page.locator("#stop")).to_be_hidden()
    expect(page.locator(".review")).to_have_count(1)
    assert_accessible(page)
    no_problems(page)
