"""The built-in quick actions: what each asks of the model, and which artifacts it fits.

A quick action never asks the model what to do: the turn forces `rewrite_artifact` and these
instructions say what the new version must change and, as important, what it must keep.
"""

from __future__ import annotations

from chat_agent.protocol import QuickAction

TEXT_ACTIONS = frozenset({"translate", "reading_level", "length", "emojis"})
CODE_ACTIONS = frozenset({"add_comments", "add_logs", "fix_bugs", "port_language"})

_KEEP = ("Change only what this asks; keep the meaning, the facts, the structure and everything else as it "
         "is. Call rewrite_artifact with the whole new version, then say in one short sentence what you did.")

_LEVELS = {
    "child": "a curious eight-year-old: short sentences, everyday words, a friendly tone",
    "teenager": "a teenager: plain words, clear examples, no jargon left unexplained",
    "college": "a college student: precise vocabulary and well-built paragraphs",
    "phd": "an expert reader at doctoral level: exact terminology, dense and rigorous",
    "pirate": "a pirate's voice (arr!), while every fact stays as it is",
}
_LENGTHS = {
    "shortest": "as short as it can be while keeping its essential points",
    "short": "noticeably shorter, about two thirds of its length, dropping what matters least",
    "long": "noticeably longer, about half again its length, with more detail and examples",
    "longest": "about twice as long, developing each point fully, with no padding",
}


class QuickActionError(ValueError):
    """The action does not fit (its artifact type, or a missing parameter)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def fits(action: QuickAction, artifact_type: str) -> bool:
    if action.name in TEXT_ACTIONS:
        return artifact_type == "text"
    if action.name in CODE_ACTIONS:
        return artifact_type == "code"
    return True  # custom actions fit any artifact


def _need(value: str | None, what: str, action: str) -> str:
    if not value or not value.strip():
        raise QuickActionError("invalid_frame", f"The {action} quick action needs `{what}`.")
    return value.strip()


def instructions(action: QuickAction, language: str | None = None) -> str:
    """What the model is told to do for a built-in action (`language`: the code's language)."""
    name = action.name
    if name == "translate":
        task = f"Translate the artifact into {_need(action.language, 'language', name)}, naturally, as a native writer would."
    elif name == "reading_level":
        level = _need(action.level, "level", name)
        task = f"Rewrite the artifact for {_LEVELS[level]}."
    elif name == "length":
        length = _need(action.length, "length", name)
        task = f"Make the artifact {_LENGTHS[length]}."
    elif name == "emojis":
        task = "Add fitting emojis to the artifact, sparingly, where they help the reader; do not change the words."
    elif name == "add_comments":
        task = "Add clear comments to the code that explain why it does what it does; do not change its behaviour."
    elif name == "add_logs":
        task = ("Add useful log statements to the code (entry to important steps, decisions, errors), in the "
                "logging style idiomatic for its language; do not change its behaviour.")
    elif name == "fix_bugs":
        task = ("Find and fix the bugs in the code. Fix only real defects; keep its structure and style, and "
                "note each fix in one short comment where it is.")
    elif name == "port_language":
        target = _need(action.language, "language", name)
        task = (f"Port the code{' from ' + language if language else ''} to {target}, idiomatically, with the "
                f"same behaviour; set the artifact's language to {target}.")
    else:
        raise QuickActionError("invalid_frame", f"Unknown quick action {name!r}.")
    return f"{task} {_KEEP}"


def label(action: QuickAction) -> str:
    """How the action shows in the visible history when the user typed nothing."""
    detail = action.language or action.level or action.length or ""
    return f"[Quick action: {action.name.replace('_', ' ')}{' – ' + detail if detail else ''}]"
