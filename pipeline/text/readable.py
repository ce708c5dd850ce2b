"""Bytes or text -> what a page shows: spaces, newlines and control characters visible, broken UTF-8
byte by byte."""
from __future__ import annotations

import unicodedata

from pipeline.text.byte_level import piece_bytes

VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


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
    """Text with spaces, newlines and tabs drawn ('␣', '↵', '⇥') and control characters escaped ('\\x1b')."""
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


def piece_text(piece: str) -> str:
    """A tokenizer's piece ('Ġtom') -> readable text ('␣tom')."""
    return render_bytes(piece_bytes(piece))
