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
    text = re.sub(r"\r\n|\r|\n", "↵", text)  # a line break could end the span and start a block
    fence = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}"


def one_html_block(html_source: str) -> str:
    """HTML for st.markdown(..., unsafe_allow_html=True) kept as one raw HTML block: a blank line in it
    (from a tool name, say) would end the block and let Markdown read the rest, links included. Line
    breaks become spaces: '<div>a\\n\\n[x](http://evil.example.org)</div>' -> '<div>a  [x](http://evil.example.org)</div>'."""
    return html_source.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")


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


_MD_INLINE = re.compile(r"([\\`*_\[\]<>!~$&])")  # what starts a link, image, tag, entity, code, emphasis or LaTeX
_MD_BLOCK_START = re.compile(r"^(\s*)(?:([#>+-])|(\d+)([.)]))")  # a heading, quote or list at the start
_AUTOLINK = re.compile(r"(?i)(https?|www|ftp|mailto|xmpp)(?=[:.])")  # where GFM starts a link from bare text


def markdown_text(text) -> str:
    """Any text shown literally inside Markdown (st.error, st.warning, st.caption, st.markdown): no link, image,
    emphasis, LaTeX or heading. Markdown's marks are backslash-escaped, line breaks become ↵ (so no block can
    start inside), and a word joiner (U+2060, invisible) goes after 'http'/'www' and after '@': GFM finds bare
    addresses in the text left after escapes, so escaping alone would still give a live link.
    '[x](http://evil.example.org)' -> '\\[x\\](http\u2060://evil.example.org)'."""
    text = re.sub(r"\r\n|\r|\n", "↵", str(text))
    text = _AUTOLINK.sub("\\1\u2060", text).replace("@", "@\u2060")
    text = _MD_INLINE.sub(r"\\\1", text)
    return _MD_BLOCK_START.sub(lambda m: m.group(1) + (f"\\{m.group(2)}" if m.group(2) else
                                                      f"{m.group(3)}\\{m.group(4)}"), text, count=1)
