"""Rules across messages: same-role runs merged into turns, `tool_use`/`tool_result` pairing,
and thinking blocks (signatures, and thinking at the start of an open tool loop)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.fakes.anthropic_script import Signer, invalid


def blocks_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


@dataclass
class Turn:
    role: str
    first_index: int
    blocks: list[tuple[int, int, dict[str, Any]]]  # (message index, block index, block)


def merge_turns(messages: list[dict[str, Any]]) -> list[Turn]:
    turns: list[Turn] = []
    for i, message in enumerate(messages):
        if not turns or turns[-1].role != message["role"]:
            turns.append(Turn(message["role"], i, []))
        turns[-1].blocks.extend((i, j, b) for j, b in enumerate(blocks_of(message)))
    return turns


def check_tool_pairing(turns: list[Turn]) -> None:
    seen_ids: set[str] = set()
    for t, turn in enumerate(turns):
        if turn.role == "assistant":
            _check_tool_uses_answered(turn, turns[t + 1] if t + 1 < len(turns) else None, seen_ids)
        else:
            previous = turns[t - 1] if t > 0 else None
            _check_tool_results(turn, _tool_use_ids(previous) if previous else [])


def _tool_use_ids(turn: Turn) -> list[str]:
    return [b["id"] for _, _, b in turn.blocks if b.get("type") == "tool_use"]


def _check_tool_uses_answered(turn: Turn, following: Turn | None, seen_ids: set[str]) -> None:
    for i, j, block in turn.blocks:
        if block.get("type") == "tool_use":
            if block["id"] in seen_ids:
                raise invalid(f"messages.{i}.content.{j}: `tool_use` ids must be unique")
            seen_ids.add(block["id"])
    answered = {b.get("tool_use_id") for _, _, b in following.blocks} if following else set()
    missing = [tid for tid in _tool_use_ids(turn) if tid not in answered]
    if missing:
        index = max(i for i, _, b in turn.blocks if b.get("type") == "tool_use")
        raise invalid(
            f"messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately after: "
            f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` block "
            "in the next message."
        )


def _check_tool_results(turn: Turn, expected_ids: list[str]) -> None:
    seen_other = False
    for i, j, block in turn.blocks:
        if block.get("type") != "tool_result":
            seen_other = True
            continue
        if block["tool_use_id"] not in expected_ids:
            raise invalid(
                f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{block['tool_use_id']}. Each `tool_result` block must have a corresponding `tool_use` "
                "block in the previous message."
            )
        if seen_other:
            raise invalid(
                f"messages.{i}.content.{j}: `tool_result` blocks must come first in the user message, "
                "before any other content"
            )


# -- thinking blocks -----------------------------------------------------------------------


def check_thinking_blocks(messages: list[dict[str, Any]], signer: Signer) -> None:
    for i, message in enumerate(messages):
        for j, block in enumerate(blocks_of(message)):
            where = f"messages.{i}.content.{j}"
            if block.get("type") == "thinking":
                _check_signature(where, block, signer)
            elif block.get("type") == "redacted_thinking":
                data = block.get("data")
                if not isinstance(data, str) or not signer.verify_redacted(data):
                    raise invalid(f"{where}: Invalid `data` in `redacted_thinking` block")


def _check_signature(where: str, block: dict[str, Any], signer: Signer) -> None:
    if not isinstance(block.get("thinking"), str):
        raise invalid(f"{where}.thinking.thinking: Field required")
    signature = block.get("signature")
    if not isinstance(signature, str):
        raise invalid(f"{where}.thinking.signature: Field required")
    if not signer.verify(block["thinking"], signature):
        raise invalid(f"{where}: Invalid signature in thinking block")


def check_loop_starts_with_thinking(turns: list[Turn]) -> None:
    """While a tool loop is open, the assistant turn that opened it must start with thinking.

    The loop opens at the last user turn that is not only tool results; later assistant
    turns of the same loop need no thinking of their own (the model thinks once per turn).
    """
    start = max((t for t, turn in enumerate(turns) if turn.role == "user" and not _only_tool_results(turn)), default=0)
    loop = turns[start + 1 :]
    if not any(turn.role == "user" for turn in loop):
        return  # no tool_result yet: a fresh turn, old thinking may be dropped
    opener = next((turn for turn in loop if turn.role == "assistant"), None)
    if opener is None or not opener.blocks:
        return
    i, j, first = opener.blocks[0]
    if first.get("type") not in ("thinking", "redacted_thinking"):
        raise invalid(
            f"messages.{i}.content.{j}.type: Expected `thinking` or `redacted_thinking`, but found "
            f"`{first.get('type')}`. When `thinking` is enabled, a final `assistant` message must start with a "
            "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend "
            "you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. "
            "Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
        )


def _only_tool_results(turn: Turn) -> bool:
    return any(b.get("type") == "tool_result" for _, _, b in turn.blocks) and all(
        b.get("type") == "tool_result" for _, _, b in turn.blocks
    )
