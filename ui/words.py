"""English the pages and the report write: counts with their noun."""
from __future__ import annotations

from pipeline.text.counts import plural  # noqa: F401  (the one plural helper: pages import it from here)


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
