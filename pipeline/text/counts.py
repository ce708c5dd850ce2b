"""A count with its noun, in English: the one plural helper of the project (the pages get it through ui/words.py;
pipeline/ writes its own sentences too: the CLI, the cache audit's notes, Compare's answers)."""
from __future__ import annotations


def plural(n: int, word: str, many: str | None = None) -> str:
    """plural(1, 'token') -> '1 token'; plural(2, 'token') -> '2 tokens'; plural(3, 'child', 'children')."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"
