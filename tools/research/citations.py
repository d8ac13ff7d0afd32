"""A research report's citations and its Sources list: `cite` keeps the valid ones, renumbered.

The writer cites numbered sources as `[n]`; models also write ranges, lists and links, and
sometimes a source that does not exist or a Sources list of their own. `cite` normalizes
all that to `[n]` in order of first use and appends our list, built from the pages read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from chat_agent.tooling import one_line


@dataclass(frozen=True, slots=True)
class Source:
    n: int
    title: str
    url: str


# [3], [1, 4], [2-5], and [3](url) which some models write for a citation.
_CITATION = re.compile(r"( ?)\[(\d{1,3}(?:\s*(?:,|;|-|–)\s*\d{1,3})*)\](?:\([^()\s]*\))?")
_SOURCES_HEADING = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*|__)?(?:sources|references|bibliography|works cited)(?:\*\*|__)?[ \t]*:?[ \t]*"
    r"(?:\*\*|__)?[ \t]*$", re.IGNORECASE | re.MULTILINE)  # fmt: skip


def cite(text: str, sources: list[Source], notes: list[str]) -> tuple[str, list[Source]]:
    """The report with valid citations only, renumbered in order of first use, and our own Sources list.

    The model's own source list (if it wrote one) is dropped: ours has the exact titles and URLs.
    """
    headings = list(_SOURCES_HEADING.finditer(text))
    body = text[: headings[-1].start()].rstrip() if headings else text
    order: dict[int, int] = {}  # source number → number in the report
    bad: set[int] = set()

    def renumber(match: re.Match[str]) -> str:
        numbers = _numbers(match[2])
        bad.update(n for n in numbers if not 1 <= n <= len(sources))
        kept = [order.setdefault(n, len(order) + 1) for n in numbers if 1 <= n <= len(sources)]
        return match[1] + "".join(f"[{n}]" for n in sorted(set(kept))) if kept else ""

    body = _CITATION.sub(renumber, body)
    if bad:
        notes.append(f"Removed citations of sources that do not exist: {', '.join(f'[{n}]' for n in sorted(bad))}.")
    if order:
        cited = [Source(new, sources[old - 1].title, sources[old - 1].url) for old, new in order.items()]
    else:
        notes.append("The report cites none of its sources; all the pages read are listed.")
        cited = list(sources)
    return body + "\n\n" + sources_section(cited), cited


def _numbers(group: str) -> list[int]:
    numbers: list[int] = []
    for part in re.split(r"\s*[,;]\s*", group.strip()):
        ends = [int(x) for x in re.split(r"\s*[-–]\s*", part)]
        numbers += list(range(ends[0], ends[-1] + 1)) if len(ends) == 2 and 0 < ends[1] - ends[0] < 20 else ends
    return numbers


def sources_section(sources: list[Source]) -> str:
    return "## Sources\n\n" + "\n".join(f"- [{s.n}] {one_line(s.title)} — {s.url}" for s in sources)
