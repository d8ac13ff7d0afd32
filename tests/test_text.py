"""Text that cannot be encoded as UTF-8: found, and repaired, the one way the server does it."""

from __future__ import annotations

from chat_agent.agent.partial import FieldStream
from chat_agent.text import all_encodable, encodable, scrub, scrub_json


def test_lone_surrogates_are_found_and_replaced() -> None:
    assert encodable("plain") and encodable("emoji \U0001F600 é") and not encodable("a\ud800b")
    assert scrub("a\ud800b\udfffc") == "a\ufffdb\ufffdc"
    clean = {"k": ["fine"]}
    assert scrub_json(clean) is clean  # nothing to repair: nothing copied
    assert scrub_json({"k\udc00": ["x\ud83d", 1, None], "n": {"deep": "\udfff"}}) == {
        "k\ufffd": ["x\ufffd", 1, None], "n": {"deep": "\ufffd"}}


def test_a_deep_structure_is_checked_without_recursion() -> None:
    deep: list = ["\ud800"]
    for _ in range(100_000):
        deep = [deep]
    assert all_encodable(deep) is False
    assert all_encodable({"a": [{"b": "ok"}]}) is True


def test_streamed_artifact_text_repairs_a_lone_escape_the_model_wrote() -> None:
    stream = FieldStream("content")
    pieces = ['{"content": "a \\ud800', ' b \\ud83d', '\\ude00 c"}']
    text = "".join(stream.feed(piece) for piece in pieces)
    assert text == "a \ufffd b \U0001F600 c"  # the pair split across pieces stays a pair
