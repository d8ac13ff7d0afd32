"""Edits as changes (chat_agent.edits) and the `artifact_edit` frame applied to an artifact state."""

from __future__ import annotations

import random
import time

import pytest

from chat_agent import edits
from chat_agent.protocol import ArtifactEdit, ArtifactState, ArtifactVersion, server_frames
from tests import pace


@pytest.mark.parametrize("old, new, changes", [
    ("Hello world", "Hello world", []),
    ("Hello world", "Hello brave world", [(6, 6, "brave ")]),
    ("Hello world", "Hello", [(5, 11, "")]),
    ("Hello world", "Jello world", [(0, 1, "J")]),
    ("", "new", [(0, 0, "new")]),
    ("old", "", [(0, 3, "")]),
    ("aaaa", "aaaaaa", [(4, 4, "aa")]),  # the common prefix and suffix never overlap
    ("abcabc", "abc", [(3, 6, "")]),
    ("é🌱 first bud", "é🌱 EARLY bud", [(3, 8, "EARLY")]),  # code points, not UTF-16 units
])
def test_diff_finds_the_one_changed_span_and_apply_restores_it(old, new, changes):
    assert edits.diff(old, new) == changes
    assert edits.apply(old, changes) == new


def test_diff_and_apply_agree_on_random_edits():
    rng = random.Random(7)
    alphabet = "ab\né🌱"
    for _ in range(2000):
        old = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 30)))
        start = rng.randrange(0, len(old) + 1)
        end = rng.randrange(start, len(old) + 1)
        new = old[:start] + "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 5))) + old[end:]
        changes = edits.diff(old, new)
        assert edits.apply(old, changes) == new
        assert edits.size(changes) <= len(new) - start - (len(old) - end) or not changes


def test_a_span_edit_on_a_megabyte_is_one_small_change_found_fast():
    big = ("The canvas keeps the document beside the chat. " * 22_000)[:1_000_000]
    start = 500_003
    new = big[:start] + "0123456789" + big[start + 10:]
    began = time.perf_counter()
    changes = edits.diff(big, new)
    took = time.perf_counter() - began
    assert len(changes) == 1 and edits.size(changes) <= 10 and edits.apply(big, changes) == new
    assert took < pace.scaled(0.25), f"diffing 1 MB took {took:.3f} s"  # block compares in C: a few ms


@pytest.mark.parametrize("changes", [
    [(5, 2, "x")],  # backwards
    [(0, 20, "x")],  # past the end
    [(4, 6, "x"), (2, 3, "y")],  # out of order
    [(0, 4, "x"), (3, 5, "y")],  # overlapping
    [("0", 1, "x")],  # not offsets
])
def test_changes_that_do_not_fit_their_base_are_refused(changes):
    with pytest.raises(edits.EditError):
        edits.apply("0123456789", changes)


def state(index: int, content: str, title: str = "Poem", language: str | None = None) -> ArtifactState:
    version = ArtifactVersion(index=index, type="code" if language else "text", title=title, language=language,
                              content=content)
    return ArtifactState(id="art1", current_index=index, version_count=index + 2, current=version)


def test_an_artifact_edit_frame_parses_and_applies_to_its_base_only():
    wire = ('{"type":"artifact_edit","conversationId":"c1","seq":9,"artifactId":"art1","baseIndex":2,"index":6,'
            '"changes":[{"start":0,"end":1,"text":"J"},{"start":5,"end":5,"text":"!"}],"title":"Greeting"}')
    edit = server_frames.validate_json(wire)
    assert isinstance(edit, ArtifactEdit) and edit.language is None
    after = edit.apply(state(2, "Hello"))
    assert after.current_index == after.version_count == after.current.index == 6
    assert after.current.content == "Jello!" and after.current.title == "Greeting" and after.current.type == "text"
    assert not edit.applies_to(state(3, "Hello")) and not edit.applies_to(None)
    with pytest.raises(edits.EditError):
        edit.apply(state(3, "Hello"))
    # the optional fields stay off the wire when they did not change
    assert '"title"' not in ArtifactEdit(artifact_id="a", base_index=1, index=2, changes=[]).to_json()
