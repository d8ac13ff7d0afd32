"""The terminal client's view of a conversation's branches (PROTOCOL 1.2 trees): which user
message `/edit` resends, and what `/branches` lists: every point of the active path where
other versions exist, with the other versions' ids to switch to."""

from __future__ import annotations

from typing import Any

from chat_agent.protocol import VisibleMessage

from .render import Style


def last_user_message(messages: list[VisibleMessage]) -> VisibleMessage | None:
    return next((m for m in reversed(messages) if m.role == "user"), None)


def active_path(tree: dict[str, Any]) -> list[dict[str, Any]]:
    by_id = {m["id"]: m for m in tree["messages"]}
    path: list[dict[str, Any]] = []
    at = tree.get("leafId")
    while at is not None and at in by_id and len(path) <= len(by_id):
        path.append(by_id[at])
        at = by_id[at]["parentId"]
    return path[::-1]


def render_branches(tree: dict[str, Any], style: Style) -> str:
    """The branch points of the active path: each message that has other versions, with all
    of them (the active one marked), newest last; or a line saying there are none."""
    siblings: dict[tuple[Any, str], list[dict[str, Any]]] = {}
    for message in tree["messages"]:
        siblings.setdefault((message["parentId"], message["role"]), []).append(message)
    lines: list[str] = []
    for depth, message in enumerate(active_path(tree)):
        versions = siblings[(message["parentId"], message["role"])]
        if len(versions) < 2:
            continue
        lines.append(style.dim(f"at message {depth + 1} ({message['role']}), {len(versions)} versions:"))
        for n, version in enumerate(versions, 1):
            mark = "*" if version["id"] == message["id"] else " "
            lines.append(f" {mark} {n}. {version['id']}  {version['preview'][:70]}")
    if not lines:
        return style.dim("no branches: every message of this conversation has one version")
    lines.append(style.dim("switch with /branches ID; /regenerate answers again, /edit TEXT resends your last message"))
    return "\n".join(lines)
