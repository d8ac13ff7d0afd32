"""Knowledge bases on the canvas page, in Chromium: a collection made and filled in the panel,
its documents indexed before the user's eyes, chosen in the composer, and the reply's citation
shown as a numbered mark with the quote and a link to the page of the document."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.browser import assert_accessible, no_problems
from tests.fakes.anthropic_fake import CitedText, Reply, Text, ToolUse
from tests.test_e2e_knowledge import FACT, manual_pdf


def test_collections_panel_picker_and_citations(page, server, fake_anthropic):
    page.goto(server.http_url + "/")
    expect(page.locator("#connection")).to_have_text("connected")
    page.click("#open-knowledge")
    page.fill("#knowledge-name", "Plant manuals")
    page.click("#knowledge-create")
    expect(page.locator("#knowledge-list li.current")).to_contain_text("Plant manuals")
    page.set_input_files("#knowledge-file", files=[{"name": "manual.pdf", "mimeType": "application/pdf",
                                                    "buffer": manual_pdf()}])
    row = page.locator("#knowledge-documents li")
    expect(row).to_contain_text("manual.pdf")
    expect(row.locator(".doc-status")).to_have_text("ready")  # the panel follows the indexing
    assert_accessible(page, "the knowledge dialog")
    page.click("#knowledge-form button[value=close]")

    # A new collection is chosen for the next messages; the picker says so.
    expect(page.locator("#knowledge-picker")).to_be_visible()
    expect(page.locator("#knowledge-count")).to_have_text(" (1)")
    fake_anthropic.enqueue(Reply([ToolUse("search_knowledge", {"query": "Zephyr coolant limit"})]),
                           Reply([Text("The manual says "), CitedText("the limit is 412 kelvin.", result=0),
                                  Text(" That is all.")]))
    page.fill("#prompt", "What is the coolant limit?")
    page.press("#prompt", "Enter")
    reply = page.locator(".message.assistant").last
    expect(reply.locator(".sources li")).to_have_count(1)
    first_call = fake_anthropic.main_bodies[-2]  # of this turn's two (the fake serves other tests before)
    assert "search_knowledge" in [t["name"] for t in first_call["tools"]]

    def shows_the_citation() -> None:
        mark = reply.locator(".cite a")
        expect(mark).to_have_text("[1]")
        assert "page 37" in mark.get_attribute("title") and FACT in mark.get_attribute("title")
        href = mark.get_attribute("href")
        assert "/api/uploads/" in href and href.endswith("#page=37")
        source = reply.locator(".sources li")
        expect(source).to_contain_text("[1] manual.pdf, page 37")
        expect(source).to_contain_text(FACT)
        # The mark follows the words it supports, before the text after them.
        text = reply.locator(".text").first.inner_text()
        assert text.index("412 kelvin.") < text.index("[1]") < text.index("That is all.")

    shows_the_citation()
    # The link opens the document itself.
    response = page.request.get(server.http_url + reply.locator(".cite a").get_attribute("href").split("#")[0])
    assert response.status == 200 and response.body().startswith(b"%PDF")
    # After a reload: from the stored parts.
    page.reload()
    expect(page.locator("#connection")).to_have_text("connected")
    reply = page.locator(".message.assistant").last
    shows_the_citation()
    assert_accessible(page)
    no_problems(page)
