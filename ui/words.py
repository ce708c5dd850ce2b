"""English the pages and the report write: counts with their noun."""
from __future__ import annotations

from pipeline.text.counts import plural  # noqa: F401  (the one plural helper: pages import it from here)


def first_values(row: list, chars: int = 28) -> str:
    """A list's first values that fit in about `chars` characters, '…' for the rest (a narrow table cell):
    first_values([1, 2, 3]) -> '[1, 2, 3]'; first_values([1, 9690, 198, 2683, 359, 253], 16) -> '[1, 9690, …]'."""
    shown = []
    for k, v in enumerate(row):
        if shown and len(", ".join(shown + [str(v)])) > chars - 2 - (3 if k < len(row) - 1 else 0):
            return "[" + ", ".join(shown) + ", …]"
        shown.append(str(v))
    return "[" + ", ".join(shown) + "]"


def clipped(text: str, most: int) -> str:
    """text cut to at most `most` characters, the last one '…' when cut (a heatmap cell's label: the hover has it
    whole). clipped('<|im_start|>', 5) -> '<|im…'."""
    return text if len(text) <= most else text[:max(most - 1, 0)] + "…"


def shortened(text: str, limit: int = 120) -> str:
    """text, or its first words up to `limit` characters and "…" (a 600-token question quoted in a sentence).

    >>> shortened("Are tomatoes fruit?")
    'Are tomatoes fruit?'
    >>> shortened("one two three four", 10)
    'one two…'
    """
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut) + "…"
