"""Tables as the command line prints them (aligned columns) and as STATUS.md and certificates write them
(Markdown), so every table of the project is laid out by the same two functions."""

from __future__ import annotations

import re
import textwrap
from typing import Collection, Sequence


def plain(rows: Sequence[Sequence[str]], width: int | None = None) -> str:
    """Aligned columns, the first row a header underlined with dashes. With ``width`` (a terminal's), the
    last column wraps at word boundaries under itself so no line is longer (it keeps 20 columns at least)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    if width is not None:
        lead = sum(widths[:-1]) + 2 * (len(widths) - 1)
        widths[-1] = min(widths[-1], max(20, width - lead))
    lines = []
    for r in rows:
        last = (textwrap.wrap(r[-1], widths[-1]) or [""]) if width is not None else [r[-1]]
        lines.append("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + ("  " if len(r) > 1 else "") + last[0])
        indent = " " * (sum(widths[:-1]) + 2 * (len(widths) - 1))
        lines += [indent + more for more in last[1:]]
    lines = [line.rstrip() for line in lines]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[int] = ()) -> list[str]:
    """Markdown table lines; cells are written as given (escape text with ``cell``). An empty header
    (``["", ""]``) makes a key/value table. ``right``: the indices of the columns to right-align (counts)."""
    rule = "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|"
    lines = ["|" + "|".join(f" {h} " if h else " " for h in header) + "|", rule]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def cell(text: object, width: int | None = None) -> str:
    """Text as one Markdown table cell: one line, '|', '\\' and '<' escaped, cut to ``width`` characters."""
    s = re.sub(r"\s+", " ", str(text)).strip()
    if width is not None and len(s) > width:
        s = s[: width - 1].rstrip() + "…"
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")
