"""A long run of chips drawn in full up to a limit, the rest folded under a cue that says how many are left:
a box never hides tokens without saying so (a scroll box of fixed height did: a Korean question sat below the
fold of a half-width column with nothing to show it was there)."""
from __future__ import annotations

from .words import plural

SUMMARY_STYLE = "cursor:pointer;color:#475569;font-size:0.85em;font-family:sans-serif;margin:4px 0"


def fold(parts: list[str], shown: int | None, noun: str = "token", sizes: list[int] | None = None) -> str:
    """parts (HTML, in order) joined; past the first `shown` items (None: no limit) the rest go into a closed
    <details> whose summary reads "N more tokens below (click to show)". sizes: how many items each part holds (a
    character spelled by 3 tokens is one part of size 3), 1 each if not given; a part is never split."""
    sizes = sizes or [1] * len(parts)
    total = sum(sizes)
    if shown is None or total <= shown:
        return "".join(parts)
    k, kept = 0, 0
    while k < len(parts) and kept + sizes[k] <= shown:
        kept += sizes[k]
        k += 1
    cue = f"{plural(total - kept, 'more ' + noun)} below (click to show)"  # "1 more token", "307 more tokens"
    rest = "".join(parts[k:])
    return "".join(parts[:k]) + f"<details><summary style='{SUMMARY_STYLE}'>{cue}</summary>{rest}</details>"
