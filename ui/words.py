"""English the pages and the report write: counts with their noun."""
from __future__ import annotations


def plural(n: int, word: str, many: str | None = None) -> str:
    """plural(1, 'token') -> '1 token'; plural(2, 'token') -> '2 tokens'; plural(3, 'child', 'children')."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"
