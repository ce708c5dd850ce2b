"""Token text made readable: the one helper every view uses to show a token (minbpe's render_token).

Token text is untrusted: it may hold `<img ...>`, `<s>` or control characters. This module only
makes it readable; escaping it for HTML or plotly is the views' job (`ui/escape.py`).
"""
from __future__ import annotations

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
    """Byte-level BPE piece -> the raw bytes it stands for. 'Ġí' -> b' \\xed'.

    A piece that is not byte-level text is encoded as UTF-8; a lone surrogate is kept as its
    (invalid) bytes so it shows as <0x..> instead of raising.
    """
    dec = _byte_decoder()
    if all(ch in dec for ch in piece):
        return bytes(dec[ch] for ch in piece)
    return piece.encode("utf-8", "surrogatepass")


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


def piece_text(piece: str) -> str:
    """A tokenizer's piece ('Ġtom') -> readable text ('␣tom')."""
    return render_bytes(piece_bytes(piece))


def token_text(tokenizer, token_id: int) -> str:
    """Readable text of one token id; special tokens keep their name ('<|im_end|>')."""
    piece = tokenizer.convert_ids_to_tokens([int(token_id)])[0]
    return piece if int(token_id) in _special_ids(tokenizer) else piece_text(piece)


def tokens_text(tokenizer, ids) -> list[str]:
    """token_text for many ids at once."""
    special = _special_ids(tokenizer)
    pieces = tokenizer.convert_ids_to_tokens([int(i) for i in ids])
    return [p if int(i) in special else piece_text(p) for i, p in zip(ids, pieces)]


def _special_ids(tokenizer) -> frozenset[int]:
    cached = getattr(tokenizer, "_tpe_special_ids", None)
    if cached is None:
        cached = frozenset(tokenizer.all_special_ids)
        try:
            tokenizer._tpe_special_ids = cached
        except AttributeError:
            pass
    return cached


def plural(n: int, word: str, many: str | None = None) -> str:
    """plural(1, 'token') -> '1 token'; plural(2, 'token') -> '2 tokens'."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"
