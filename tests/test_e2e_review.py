"""Review (PROTOCOL 1.2): after a turn that changed the artifact or made an image, a reviewer
model call judges it; a failed review is revised in the same turn (`auto`) or waits for the
user (`ask`), across reconnects and instances; abort and timeouts accept; reviews are stored
with the reply and their calls counted in `done.usage`."""

from __future__ import annotations

import base64
import io
import json
import time

import httpx

import pytest
from PIL import Image

from tests import pace
from tests.conftest import SMALL_MODEL
from tests.fakes.anthropic_fake import Reply, ToolUse, Verdict
from tests.fakes.anthropic_script import is_review
from tests.instances import instances, moto, s3_env  # noqa: F401  (fixtures)
from tests.support import connect, polled, recv, resumed, send, until

DRAFT = "Tides rise and fall twice a day."
REVISED = DRAFT + "\n\nIn short: check the tide table before you go."
GENERATE = ToolUse("generate_artifact", {"title": "Tides", "type": "text", "content": DRAFT})
REWRITE = ToolUse("rewrite_artifact", {"content": REVISED})
ASK = "Write a note on tides with a one-line conclusion"


def of(frames: list[dict], kind: str) -> list[dict]:
    return [f for f in frames if f["type"] == kind]


def reviews_sent(fake) -> list[dict]:
    return [r.body for r in fake.requests if is_review(r.body)]


def review_settings(decision: str = "auto", revisions: int = 2) -> dict:
    return {"review": {"enabled": True, "maxRevisions": revisions, "decision": decision}}


@pytest.fixture(autouse=True)
def _clean_verdicts(fake_anthropic):
    yield
    fake_anthropic.drop_queue()


async def test_a_failed_review_is_revised_in_the_same_turn(make_server, fake_anthropic):
    server = make_server()
    status, _ = server.request("PUT", "/api/memories", body={"styleRules": ["End with a one-line summary."],
                                                             "content": ["Sails on weekends."]})
    assert status == 200
    ws, session = await connect(server)
    assert "review" in session["features"] and session["pendingReviews"] == []
    fake_anthropic.verdicts(Verdict(False, 0.3, "It has no conclusion.", ["Add a one-line conclusion"]),
                            Verdict(True, 0.9, "Now it concludes."))
    fake_anthropic.enqueue(Reply([GENERATE]), Reply("Drafted."), Reply([REWRITE]), Reply("Added a conclusion."))
    first = len(fake_anthropic.requests)
    await send(ws, type="message", content=ASK, settings=review_settings())
    frames = await until(ws, "done", timeout=60)
    assert len(of(frames, "done")) == 1 and frames[-1]["stopReason"] == "end_turn"

    failed, passed = of(frames, "review")
    reply_id = frames[-1]["messageId"]
    assert failed["messageId"] == passed["messageId"] == reply_id
    assert failed["target"] == {"kind": "artifact", "index": 1} and passed["target"] == {"kind": "artifact", "index": 2}
    assert (failed["passed"], failed["score"], failed["revision"]) == (False, 0.3, 0)
    assert failed["feedback"] == "It has no conclusion." and failed["suggestions"] == ["Add a one-line conclusion"]
    assert (passed["passed"], passed["score"], passed["revision"]) == (True, 0.9, 1)
    assert failed["reviewId"] != passed["reviewId"] and not of(frames, "review_request")
    # The order a client sees: first version, its review, the revision, its review, done.
    kinds = [f["type"] for f in frames if f["type"] in ("artifact", "artifact_edit", "review", "done")]
    assert kinds[0] == "artifact" and kinds[1:] in (["review", "artifact_edit", "review", "done"],
                                                    ["review", "artifact", "review", "done"])

    # What the reviewer read: the request, the memories, the versions before and after.
    made = fake_anthropic.requests[first:]
    first_review, second_review = reviews_sent(fake_anthropic)[-2:]
    assert first_review["model"] == SMALL_MODEL and first_review["tool_choice"]["name"] == "submit_review"
    read = json.dumps(first_review["messages"])
    assert ASK in read and "End with a one-line summary." in read and "Sails on weekends." in read
    assert DRAFT in read and "none: the assistant created the artifact" in read
    read = json.dumps(second_review["messages"])
    assert 'artifact_before version=\\"1\\"' in read and "check the tide table" in read
    # The model got the feedback for its revision.
    mains = [r.body for r in made if not is_review(r.body) and r.body.get("model") != SMALL_MODEL]
    assert len(mains) == 4
    told = json.dumps(mains[2]["messages"][-1])
    assert "It has no conclusion." in told and "Add a one-line conclusion" in told and "0.30" in told

    # done.usage counts every call of the turn, the reviews' too.
    counted = [r for r in made if r.usage and (is_review(r.body) or r.body.get("model") != SMALL_MODEL)]
    assert len(counted) == 6
    assert frames[-1]["usage"]["outputTokens"] == sum(r.usage["output_tokens"] for r in counted)
    assert frames[-1]["usage"]["inputTokens"] == sum(r.usage["input_tokens"] for r in counted)

    # Stored with the reply: the reviews are parts, where they happened, after a reconnect.
    ws2, again = await connect(server, session["conversationId"])
    reply = again["messages"][-1]
    assert reply["id"] == reply_id and again["pendingReviews"] == []
    parts = [p for p in reply["parts"] if p["type"] == "review"]
    assert [(p["reviewId"], p["passed"], p["score"], p["revision"]) for p in parts] == \
        [(failed["reviewId"], False, 0.3, 0), (passed["reviewId"], True, 0.9, 1)]
    assert parts[0]["target"] == {"kind": "artifact", "index": 1}
    assert [p["type"] for p in reply["parts"]].index("review") < [p["type"] for p in reply["parts"]].index("text", 2)
    status, body = server.get(f"/api/conversations/{session['conversationId']}")
    assert status == 200 and [p for p in body["messages"][-1]["parts"] if p["type"] == "review"] == parts
    await ws.close()
    await ws2.close()


async def test_no_review_without_a_change_and_a_spent_budget(make_server, fake_anthropic):
    server = make_server(CHAT_AGENT_REVIEW="auto", CHAT_AGENT_REVIEW_MAX_REVISIONS="0")
    ws, _ = await connect(server)
    reviewed = len(reviews_sent(fake_anthropic))
    fake_anthropic.enqueue(Reply("Just words."))
    await send(ws, type="message", content="hello")
    frames = await until(ws, "done", timeout=30)
    assert not of(frames, "review") and len(reviews_sent(fake_anthropic)) == reviewed  # nothing made: no review
    # The server's default reviews; with no revision left a failed review ends the turn.
    fake_anthropic.verdicts(Verdict(False, 0.2, "Too short."))
    fake_anthropic.enqueue(Reply([GENERATE]), Reply("Drafted."))
    await send(ws, type="message", content=ASK)
    frames = await until(ws, "done", timeout=30)
    assert [(r["passed"], r["revision"]) for r in of(frames, "review")] == [(False, 0)]
    assert frames[-1]["stopReason"] == "end_turn" and not of(frames, "review_request")
    # Out of range: refused before anything is stored.
    await send(ws, type="message", content="x", settings={"review": {"maxRevisions": 4}})
    refused = await recv(ws)
    assert refused["type"] == "error" and refused["code"] == "invalid_frame" and "seq" not in refused
    await send(ws, type="message", content="x", settings={"review": {"decision": "later"}})
    assert (await recv(ws))["code"] == "invalid_frame"
    # A message can turn it off.
    fake_anthropic.enqueue(Reply([REWRITE]), Reply("Rewrote."))
    await send(ws, type="message", content="again", settings={"review": {"enabled": False}})
    frames = await until(ws, "done", timeout=30)
    assert not of(frames, "review")
    await ws.close()


async def test_ask_waits_for_the_user_revise_then_accept(make_server, fake_anthropic):
    server = make_server()
    ws, session = await connect(server)
    cid = session["conversationId"]
    fake_anthropic.verdicts(Verdict(False, 0.4, "No conclusion."), Verdict(False, 0.6, "Still thin."))
    fake_anthropic.enqueue(Reply([GENERATE]), Reply("Drafted."), Reply([REWRITE]), Reply("Revised."))
    await send(ws, type="message", content=ASK, settings=review_settings("ask"))
    frames = await until(ws, "review_request", timeout=30)
    review, request = of(frames, "review")[-1], frames[-1]
    assert request["reviewId"] == review["reviewId"] and request["messageId"] == review["messageId"]
    assert request["seq"] == review["seq"] + 1

    # A client connecting now finds the question in its session, and can answer it.
    ws2, late = await connect(server, cid)
    assert late["running"] is True
    assert late["pendingReviews"] == [{"messageId": request["messageId"], "reviewId": request["reviewId"]}]
    await send(ws2, type="review_decision", reviewId="rev_nobody", decision="accept")
    assert (await recv(ws2))["code"] == "not_found"
    await send(ws2, type="review_decision", reviewId=request["reviewId"], decision="maybe")
    assert (await recv(ws2))["code"] == "invalid_frame"
    await send(ws2, type="review_decision", reviewId=request["reviewId"], decision="revise",
               message="and mention the moon")
    frames = await until(ws, "review_request", timeout=30)
    decided = of(frames, "review_decision")[0]
    assert decided["reviewId"] == request["reviewId"] and decided["decision"] == "revise"
    assert "and mention the moon" in json.dumps(fake_anthropic.main_bodies[-2]["messages"][-1])
    second = of(frames, "review")[-1]
    assert second["revision"] == 1 and second["target"] == {"kind": "artifact", "index": 2}

    # Accept: the turn ends with the result as it is.
    await send(ws, type="review_decision", reviewId=frames[-1]["reviewId"], decision="accept")
    frames = await until(ws, "done", timeout=30)
    assert of(frames, "review_decision")[0]["decision"] == "accept" and not of(frames, "review")
    assert len(of(frames, "done")) == 1 and frames[-1]["stopReason"] == "end_turn"
    await send(ws, type="review_decision", reviewId=second["reviewId"], decision="accept")
    assert (await recv(ws))["code"] == "not_found"  # answered already
    _, after = await connect(server, cid)
    parts = [p for p in after["messages"][-1]["parts"] if p["type"] == "review"]
    assert [p["decision"] for p in parts] == ["revise", "accept"] and after["pendingReviews"] == []
    assert after["artifact"]["currentIndex"] == 2
    for sock in (ws, ws2):
        await sock.close()


async def test_abort_during_a_review_and_a_timed_out_question(make_server, fake_anthropic):
    server = make_server(CHAT_AGENT_APPROVAL_TIMEOUT="1.5")
    ws, session = await connect(server)
    # The reviewer is slow: abort ends the turn at once, in the middle of its call.
    fake_anthropic.verdicts(Verdict(True, 0.9, lead_delay=30))
    fake_anthropic.enqueue(Reply([GENERATE]), Reply("Drafted."))
    reviewed = len(reviews_sent(fake_anthropic))
    await send(ws, type="message", content=ASK, settings=review_settings())
    await until(ws, "artifact", timeout=30)
    await polled(lambda: len(reviews_sent(fake_anthropic)) > reviewed, 30)
    started = time.monotonic()
    await send(ws, type="abort")
    frames = await until(ws, "done", timeout=10)
    assert time.monotonic() - started < pace.scaled(1.0)
    assert frames[-1]["stopReason"] == "aborted" and not of(frames, "review")
    fake_anthropic.drop_queue()

    # Not answered in time: accepted as timed out, and the turn ends.
    fake_anthropic.verdicts(Verdict(False, 0.3, "Thin."))
    fake_anthropic.enqueue(Reply([REWRITE]), Reply("Rewrote."))
    await send(ws, type="message", content="rewrite it", settings=review_settings("ask"))
    frames = await until(ws, "done", timeout=30)
    decided = of(frames, "review_decision")[0]
    assert (decided["decision"], decided["reason"]) == ("accept", "timed_out")
    assert frames[-1]["stopReason"] == "end_turn"

    # Abort while the question is open accepts it.
    fake_anthropic.verdicts(Verdict(False, 0.3, "Thin."))
    fake_anthropic.enqueue(Reply([REWRITE]), Reply("Rewrote."))
    await send(ws, type="message", content="once more", settings={"review": {"maxRevisions": 1, "decision": "ask"}})
    request = (await until(ws, "review_request", timeout=30))[-1]
    await send(ws, type="abort")
    frames = await until(ws, "done", timeout=10)
    decided = of(frames, "review_decision")[0]
    assert decided["reviewId"] == request["reviewId"] and (decided["decision"], decided["reason"]) == ("accept", "aborted")
    assert frames[-1]["stopReason"] == "aborted"
    _, after = await connect(server, session["conversationId"])
    assert after["pendingReviews"] == [] and after["running"] is False
    await ws.close()


async def test_a_generated_image_is_shown_to_the_reviewer(make_server, fake_anthropic, fake_images):
    server = make_server(CHAT_AGENT_IMAGE_API_BASE_URL=fake_images.base_url,
                         CHAT_AGENT_IMAGE_API_KEY=fake_images.api_key)
    ws, _ = await connect(server)
    fake_anthropic.verdicts(Verdict(False, 0.3, "The sea is not calm.", ["Make the water flat"]), Verdict(True, 0.8))
    fake_anthropic.enqueue(Reply([ToolUse("generate_image", {"prompt": "a stormy sea"})]), Reply("Here it is."),
                           Reply([ToolUse("generate_image", {"prompt": "a calm flat sea"})]), Reply("Calmer now."))
    reviewed = len(reviews_sent(fake_anthropic))
    await send(ws, type="message", content="Paint a calm sea", settings=review_settings())
    frames = await until(ws, "done", timeout=90)
    made = [f["output"]["imageId"] for f in of(frames, "tool_end")]
    assert len(made) == 2 and frames[-1]["stopReason"] == "end_turn"
    failed, passed = of(frames, "review")
    assert failed["target"] == {"kind": "image", "fileId": made[0]} and not failed["passed"]
    assert passed["target"] == {"kind": "image", "fileId": made[1]} and passed["revision"] == 1
    first, second = reviews_sent(fake_anthropic)[reviewed:]
    for body, image_id in ((first, made[0]), (second, made[1])):
        blocks = body["messages"][0]["content"]
        images = [b for b in blocks if b["type"] == "image"]
        assert len(images) == 1 and images[0]["source"]["type"] == "base64"
        assert image_id in json.dumps(blocks) and "Paint a calm sea" in json.dumps(blocks)
    # The reviewer saw the very image that was made (the fake paints each prompt its own colour).
    shown = Image.open(io.BytesIO(base64.b64decode(
        [b for b in first["messages"][0]["content"] if b["type"] == "image"][0]["source"]["data"]))).convert("RGB")
    url = of(frames, "tool_end")[0]["output"]["url"]
    original = Image.open(io.BytesIO(httpx.get(server.http_url + url, timeout=10).content)).convert("RGB")
    assert shown.getpixel((5, 5)) == original.getpixel((5, 5))
    await ws.close()


async def test_a_question_survives_a_reconnect_to_another_instance(instances, fake_anthropic):
    a, b = instances(2)
    ws_a, session = await connect(a)
    cid = session["conversationId"]
    fake_anthropic.verdicts(Verdict(False, 0.3, "No conclusion."), Verdict(True, 0.95))
    fake_anthropic.enqueue(Reply([GENERATE]), Reply("Drafted."), Reply([REWRITE]), Reply("Concluded."))
    await send(ws_a, type="message", content=ASK, settings=review_settings("ask"))
    request = (await until(ws_a, "review_request", timeout=30))[-1]
    await ws_a.close()  # the user's tab goes away; the turn waits on A

    ws_b, late = await connect(b, cid)  # and comes back on B
    assert late["running"] is True
    assert late["pendingReviews"] == [{"messageId": request["messageId"], "reviewId": request["reviewId"]}]
    assert [p["type"] for p in late["messages"][-1]["parts"]].count("review") == 1
    await send(ws_b, type="review_decision", reviewId=request["reviewId"], decision="revise")
    frames = await until(ws_b, "done", timeout=60)
    assert of(frames, "review_decision")[0]["decision"] == "revise"
    assert [(r["passed"], r["revision"]) for r in of(frames, "review")] == [(True, 1)]
    assert frames[-1]["stopReason"] == "end_turn" and len(of(frames, "done")) == 1
    _, after = await connect(a, cid)
    assert after["pendingReviews"] == [] and after["artifact"]["currentIndex"] == 2
    assert [p.get("decision") for p in after["messages"][-1]["parts"] if p["type"] == "review"] == ["revise", None]
    await ws_b.close()


async def test_a_question_open_when_its_server_dies_is_accepted_once(make_server, tmp_path, fake_anthropic):
    import signal

    data = tmp_path / "data"
    lease = {"CHAT_AGENT_LEASE_SECONDS": "3"}
    server = make_server(data, **lease)
    ws, session = await connect(server)
    cid = session["conversationId"]
    fake_anthropic.verdicts(Verdict(False, 0.3, "No conclusion."))
    fake_anthropic.enqueue(Reply([GENERATE]), Reply("Drafted."))
    await send(ws, type="message", content=ASK, settings=review_settings("ask"))
    request = (await until(ws, "review_request", timeout=30))[-1]
    server.stop(signal.SIGKILL)
    server = make_server(data, **lease)  # the turn goes on here: it only had to end
    ws, _ = await connect(server, cid)
    await send(ws, type="resume", afterSeq=request["seq"])
    frames = await resumed(ws, request["seq"], timeout=40)
    decided = of(frames, "review_decision")
    assert [(d["reviewId"], d["decision"], d["reason"]) for d in decided] == \
        [(request["reviewId"], "accept", "interrupted")]
    assert len(of(frames, "done")) == 1 and frames[-1]["stopReason"] == "end_turn"
    _, after = await connect(server, cid)
    assert after["pendingReviews"] == [] and after["running"] is False
    assert [p.get("decision") for p in after["messages"][-1]["parts"] if p["type"] == "review"] == ["accept"]
    await ws.close()


async def test_an_invalid_verdict_leaves_the_result_unreviewed(make_server, fake_anthropic):
    server = make_server()
    ws, _ = await connect(server)
    # A score out of range: not a verdict. The result stands, the turn ends well, its usage counted.
    fake_anthropic.verdicts(Verdict(False, 7, "Way off.", usage={"output_tokens": 4321}))
    fake_anthropic.enqueue(Reply([GENERATE]), Reply("Drafted."))
    await send(ws, type="message", content=ASK, settings=review_settings())
    frames = await until(ws, "done", timeout=30)
    assert not of(frames, "review") and frames[-1]["stopReason"] == "end_turn"
    assert frames[-1]["usage"]["outputTokens"] >= 4321
    assert "no review of this turn: the reviewer's verdict was not valid" in server.log()
    await ws.close()
