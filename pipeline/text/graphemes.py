"""Bytes cut into characters: UTF-8 characters (a bad byte on its own), and graphemes, the characters
a reader sees (👩‍🔬 is 👩 + ZWJ + 🔬: three code points, one grapheme)."""
from __future__ import annotations

import unicodedata

from pipeline.text.readable import render_text


def utf8_chars(raw: bytes) -> list[tuple[int, int, str | None]]:
    """Cut bytes into UTF-8 characters: (byte start, byte end, the character or None for a byte that
    is not part of a valid character).  b'a\\xed\\x86\\xa0\\xed' -> [(0, 1, 'a'), (1, 4, '토'), (4, 5, None)]"""
    out, i = [], 0
    for ch in raw.decode("utf-8", errors="surrogateescape"):  # a bad byte -> one lone surrogate U+DC80..U+DCFF
        if "\udc80" <= ch <= "\udcff":
            out.append((i, i + 1, None))
            i += 1
        else:
            n = len(ch.encode("utf-8"))
            out.append((i, i + n, ch))
            i += n
    return out


def utf8_length(lead: int) -> int:
    """Bytes in the UTF-8 character a lead byte starts: 0x61 -> 1, 0xC3 -> 2, 0xED -> 3, 0xF0 -> 4;
    0 for a continuation byte (0x80-0xBF) or a byte never used in UTF-8."""
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


def graphemes(raw: bytes) -> list[tuple[int, int, str]]:
    """Characters as a reader sees them (graphemes), as (byte start, byte end, readable text).
    Bytes that are not valid UTF-8 are graphemes of their own.

    ' 👩‍🔬'.encode() -> [(0, 1, '␣'), (1, 12, '👩‍🔬')];  b'\\xed' -> [(0, 1, '<0xED>')]
    """
    import regex  # transformers' own dependency: full Unicode grapheme clusters (\\X)

    chars = utf8_chars(raw)
    out: list[tuple[int, int, str]] = []
    run: list[tuple[int, int, str]] = []  # valid characters waiting to be clustered

    def close_run():
        if not run:
            return
        text = "".join(c for _, _, c in run)
        k = 0
        for m in regex.finditer(r"\X", text):
            first, last = run[k], run[k + len(m.group()) - 1]
            out.append((first[0], last[1], _render_grapheme(m.group())))
            k += len(m.group())
        run.clear()

    for a, b, ch in chars:
        if ch is None:
            close_run()
            out.append((a, b, f"<0x{raw[a]:02X}>"))
        else:
            run.append((a, b, ch))
    close_run()
    return out


_BIDI = set("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _render_grapheme(cluster: str) -> str:
    """render_text, except that inside a multi-part character the joiners and tags that build it
    stay (👩 + ZWJ + 🔬 must still show as 👩‍🔬); direction overrides are always made visible."""
    if len(cluster) == 1:
        return render_text(cluster)
    return "".join(ch if unicodedata.category(ch) == "Cf" and ch not in _BIDI else render_text(ch) for ch in cluster)

