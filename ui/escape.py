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


def one_html_block(html_source: str) -> str:
    """HTML for st.markdown(..., unsafe_allow_html=True) kept as one raw HTML block: a blank line in it
    (from a tool name, say) would end the block and let Markdown read the rest, links included. Line
    breaks become spaces: '<div>a\\n\\n[x](http://e.example)</div>' -> '<div>a  [x](http://e.example)</div>'."""
    return html_source.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")


_MARKDOWN_SPECIAL = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation mark: CommonMark lets each be escaped
_AUTOLINK = re.compile(r"(?i)\b(?:https?|ftp)(?=:)|\bwww(?=\.)|(?=@)")  # where GFM starts a bare link


def markdown_text(text: str) -> str:
    """Plain text for st.markdown / st.error: no link, emphasis, code, LaTeX or HTML is drawn from it.

    Punctuation is backslash-escaped; GFM links bare URLs and e-mail addresses after escapes are
    read, so a word joiner (U+2060, invisible) goes before '://', 'www.' and '@'.
    '[x](http://e.example)' -> '\\[x\\]\\(http\u2060\\:\\/\\/e\\.example\\)'
    """
    return _MARKDOWN_SPECIAL.sub(r"\\\1", _AUTOLINK.sub(lambda m: m.group() + "\u2060", text))


def json_text(obj, indent: int = 2) -> str:
    """JSON for st.code(..., language="json", wrap_lines=True): st.json breaks long strings in the
    middle of words ("inc ludes"), a code block wraps at spaces. Lists of plain values stay on one
    line: {"ids": [1, 2, 3]} -> '{\\n  "ids": [1, 2, 3]\\n}'. Non-ASCII text is kept as typed."""
    import json

    def scalar_list(x) -> bool:
        return isinstance(x, list) and all(not isinstance(v, (list, dict)) for v in x)

    def dump(x, depth: int) -> str:
        pad, inner = " " * (indent * depth), " " * (indent * (depth + 1))
        if isinstance(x, dict) and x:
            body = ",\n".join(f"{inner}{json.dumps(str(k), ensure_ascii=False)}: {dump(v, depth + 1)}"
                              for k, v in x.items())
            return "{\n" + body + "\n" + pad + "}"
        if isinstance(x, list) and x and not scalar_list(x):
            return "[\n" + ",\n".join(inner + dump(v, depth + 1) for v in x) + "\n" + pad + "]"
        return json.dumps(x, ensure_ascii=False)

    return dump(obj, 0)
