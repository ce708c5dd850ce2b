"""English the pages and the report write: counts with their noun."""
from __future__ import annotations


def plural(n: int, word: str, many: str | None = None) -> str:
    """plural(1, 'token') -> '1 token'; plural(2, 'token') -> '2 tokens'; plural(3, 'child', 'children')."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


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
