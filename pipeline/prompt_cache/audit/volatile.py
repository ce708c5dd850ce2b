"""What changes between requests: dates, times and IDs, and JSON written inside a prompt's text."""
from __future__ import annotations

import json
import re

_MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
VOLATILE = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?"  # ISO date (and time)
    r"|\b\d{1,2}:\d{2}(?::\d{2})?\b"  # a time
    # a weekday with its date ('Friday 14 March 2025', 'Sunday, 3'): a weekday alone ('open on Sunday?') is what a
    # question is about, not a stamp that changes with every request
    r"|\b(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day\b,? \d{1,2}\b(?: (?:" + _MONTHS + r"))?(?: \d{4})?"
    r"|\b\d{1,2} (?:" + _MONTHS + r")(?: \d{4})?|\b(?:" + _MONTHS + r") \d{1,2}(?:, \d{4})?"
    r"|\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"  # a UUID
    r"|\b(?=[0-9a-f]*\d)[0-9a-f]{12,}\b|\b\d{6,}\b"  # a hex ID, an epoch or a long number
    r"|\b(?:req|sess|trace|msg|run)_[A-Za-z0-9]{6,}\b")


def volatile_near(text: str, char: int) -> str | None:
    """The date, time or ID in `text` that covers position `char` (or ends right before it).

    ('Today is Friday 14 March 2025.', 16) -> 'Friday 14 March 2025'
    """
    for m in VOLATILE.finditer(text, max(0, char - 40), min(len(text), char + 40)):
        if m.start() <= char <= m.end():
            return m.group()
    return None


def json_spans(text: str, limit: int = 200) -> list[tuple[int, int, object]]:
    """JSON objects or arrays written inside a text: [(start, end, value)], at most `limit`.

    At most 200 failed attempts, reading at most ~8x the text in all, so a text of a million `[`
    costs about as much as a short one. 'ctx: {"b": 1, "a": 2} ok' -> [(5, 21, {'b': 1, 'a': 2})]
    """
    decoder, spans, end, budget, failures = json.JSONDecoder(), [], 0, 8 * len(text) + 10_000, 0
    for m in _OPENERS.finditer(text):
        start = m.start()
        if budget <= 0 or failures >= 200 or len(spans) >= limit:
            break
        if start < end:  # inside a span already found
            continue
        try:
            value, stop = decoder.raw_decode(text, start)
        except json.JSONDecodeError as e:
            budget, failures = budget - (e.pos - start + 1), failures + 1
            continue
        except RecursionError:
            budget, failures = budget - 10_000, failures + 1
            continue
        if isinstance(value, (dict, list)) and value:
            spans.append((start, stop, value))
            end = stop
    return spans


_OPENERS = re.compile(r"[\[{]")


def sort_keys_text(text: str) -> str:
    """Every JSON object written inside `text` re-serialised with sorted keys (other text unchanged).

    'ctx: {"b": 1, "a": 2}' -> 'ctx: {"a": 2, "b": 1}'
    """
    out, pos = [], 0
    for start, end, value in json_spans(text, limit=100_000):
        out += [text[pos:start], json.dumps(value, sort_keys=True, ensure_ascii=False)]
        pos = end
    return "".join(out) + text[pos:] if out else text
