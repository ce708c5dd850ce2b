"""Making untrusted text safe to show: HTML, plotly labels and Markdown.

Token text may hold `<img ...>`, `<s>` or backticks; every view passes it through these helpers.
"""
from __future__ import annotations

import html
import re


def html_text(text: str) -> str:
    """Escape for HTML (also quotes, since text may land in attributes)."""
    return html.escape(text, quote=True)


def plotly_label(text: str) -> str:
    """Plotly reads a subset of HTML in labels (`<b>`, `<br>`, `<s>`): neutralise it.

    '<s>' -> '&lt;s&gt;' which plotly shows as the literal text <s>.
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def axis_labels(pieces: list[str]) -> list[str]:
    """Unique, safe axis labels: repeated tokens would otherwise collapse into one tick."""
    return [plotly_label(f"({i}){p}") for i, p in enumerate(pieces)]


def code_span(text: str) -> str:
    """Markdown inline code showing `text` literally (no LaTeX, emphasis or HTML): 'a`b' -> '`` a`b ``'."""
    fence = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}"
