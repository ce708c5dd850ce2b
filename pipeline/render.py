"""Making token text safe and readable. Every view goes through these helpers.

Token text is untrusted: it may hold `<img ...>`, `<s>` or control characters.
"""
from __future__ import annotations

import html
import re
import unicodedata
from functools import lru_cache

VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode: byte-level BPE piece characters -> raw bytes."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def piece_bytes(piece: str) -> bytes:
    """Byte-level BPE piece -> the raw bytes it stands for. 'Ġí' -> b' \\xed'."""
    dec = _byte_decoder()
    if all(ch in dec for ch in piece):
        return bytes(dec[ch] for ch in piece)
    return piece.encode("utf-8")


def render_bytes(raw: bytes) -> str:
    """Readable form of a token's bytes: spaces/newlines visible, broken UTF-8 as <0xNN>.

    b' the' -> '␣the';  b'\\n' -> '↵';  b'\\xed\\x86' -> '<0xED><0x86>'
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return _render_mixed(raw)
    return render_text(text)


def render_text(text: str) -> str:
    out = []
    for ch in text:
        if ch in VISIBLE:
            out.append(VISIBLE[ch])
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            out.append(f"\\u{ord(ch):04x}" if ord(ch) > 0xFF else f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def _render_mixed(raw: bytes) -> str:
    """Decode the valid UTF-8 runs, show the rest byte by byte."""
    out, i = [], 0
    while i < len(raw):
        for j in range(min(len(raw), i + 4), i, -1):
            try:
                out.append(render_text(raw[i:j].decode("utf-8")))
                i = j
                break
            except UnicodeDecodeError:
                continue
        else:
            out.append(f"<0x{raw[i]:02X}>")
            i += 1
    return "".join(out)


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
