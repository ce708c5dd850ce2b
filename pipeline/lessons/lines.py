"""The line of a stage, one of its tables or one of its keys in a lesson's TOML text: tomllib says where a syntax
error is, but gives no line for a value it read, so a check that refuses a value finds its line here.

    line_of(text, stage=2, table="request", key="temperature")  # the line of `temperature =` in the third stage's
                                                                 # [stages.request] (or its inline `request = {...}`)
Lines are numbered from 1. What is not found falls back to the nearest enclosing line found (the stage's header).
"""
from __future__ import annotations

import re

_STAGE_HEADER = re.compile(r"^\s*\[\[\s*stages\s*\]\]")
_TABLE_HEADER = re.compile(r"^\s*\[")


def _key_pattern(key: str) -> re.Pattern:
    quoted = re.escape(key)
    return re.compile(rf"""(^|[{{,\s])(?:{quoted}|"{quoted}"|'{quoted}')\s*=""")


def _stage_spans(lines: list[str]) -> list[tuple[int, int]]:
    starts = [i for i, line in enumerate(lines) if _STAGE_HEADER.match(line)]
    return [(s, starts[n + 1] if n + 1 < len(starts) else len(lines)) for n, s in enumerate(starts)]


def _find_key(lines: list[str], span: tuple[int, int], key: str, top_only: bool) -> int | None:
    """The first line in span holding `key =`; top_only: before any [table] header inside the span (after its own)."""
    pattern = _key_pattern(key)
    for i in range(span[0], span[1]):
        if top_only and i > span[0] and _TABLE_HEADER.match(lines[i]):
            return None
        if pattern.search(lines[i].split("#", 1)[0]):
            return i
    return None


def line_of(text: str, stage: int | None = None, table: str | None = None, key: str | None = None) -> int:
    """The 1-based line of `key` (in `table` of stage `stage`, or at the top of the file when stage is None)."""
    lines = text.splitlines()
    if stage is None:
        first = next((i for i, line in enumerate(lines) if _TABLE_HEADER.match(line)), len(lines))
        span = (0, first)
    else:
        spans = _stage_spans(lines)
        if stage >= len(spans):
            return 1
        span = spans[stage]
    found = span[0]
    if table is not None:
        header = re.compile(rf"^\s*\[\s*stages\s*\.\s*{re.escape(table)}\s*\]")
        start = next((i for i in range(*span) if header.match(lines[i])), None)
        if start is not None:
            end = next((i for i in range(start + 1, span[1]) if _TABLE_HEADER.match(lines[i])), span[1])
            span, found = (start, end), start
        else:
            inline = _find_key(lines, span, table, top_only=True)
            if inline is None:
                return found + 1
            found = inline
            if key is not None:  # `poll = {kind = "...", question = "..."}`: the key on that line or the next
                return found + 1
    if key is not None:
        at = _find_key(lines, span, key, top_only=table is None)
        if at is not None:
            found = at
    return found + 1
