"""GPT-2's byte map: the characters of a byte-level BPE piece -> the raw bytes they stand for.

Byte-level BPE (GPT-2, SmolLM2, Llama 3) writes every byte as one printable character: 'Ġ' is the
space byte, 'í' is 0xED. The table is built here, not taken from `tokenizers`: its ByteLevel decoder
(`tokenizers.decoders.ByteLevel().decode`) returns a str, with bytes that are not whole UTF-8 replaced
by U+FFFD, while the pages need the raw bytes of ONE token, which is often a part of a character
('토' is three tokens: ED, 86, A0). For every byte that can be part of valid UTF-8 the table and the
decoder agree (tests/pipeline/text/test_render.py compares them over all 256 bytes).
"""
from __future__ import annotations

import re
from functools import lru_cache

# SentencePiece's byte fallback: a character outside the vocabulary is spelled as its UTF-8 bytes, one
# token each, named '<0xEB>', '<0x98>', '<0xA0>' (Gemma's '똠'). A byte-level BPE vocabulary could in principle
# hold the literal text '<0xEB>' as a token; SmolLM2's does not (test_render.py checks both vocabularies).
BYTE_FALLBACK = re.compile(r"<0x([0-9A-F]{2})>")


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

    SentencePiece's byte-fallback piece '<0xEB>' is the one byte it names. A piece that is not byte-level
    text is encoded as UTF-8, SentencePiece's '▁' read as the space it
    stands for ('▁tomatoes' -> b' tomatoes'); a lone surrogate is kept as its
    (invalid) bytes so it shows as <0x..> instead of raising.
    """
    fallback = BYTE_FALLBACK.fullmatch(piece) if piece.startswith("<0x") else None
    if fallback:  # SentencePiece byte fallback: '<0xEB>' is the byte 0xEB
        return bytes([int(fallback.group(1), 16)])
    if SENTENCEPIECE_SPACE not in piece:
        try:  # every character byte-level: each becomes the one byte it stands for
            return piece.translate(_to_latin1()).encode("latin-1")
        except UnicodeEncodeError:  # a character that is not byte-level text (it stays, or became, past U+00FF)
            pass
    # SentencePiece writes a space as '▁' (U+2581, never a byte-level character): '▁tomatoes' -> b' tomatoes'
    return piece.replace(SENTENCEPIECE_SPACE, " ").encode("utf-8", "surrogatepass")


@lru_cache(maxsize=1)
def _to_latin1() -> dict[int, str]:
    """str.translate table: a byte-level character -> the Latin-1 character of its byte; a character below U+0100
    that is not byte-level text (a plain space, a control character) -> one that Latin-1 cannot encode, so a
    piece is turned into bytes in one translate and one encode, or not at all (SmolLM2's 49,152 pieces:
    0.08 -> 0.05 s)."""
    table = {code: "\U0010FFFF" for code in range(256)}
    table.update({ord(ch): chr(b) for ch, b in _byte_decoder().items()})
    return table


SENTENCEPIECE_SPACE = "\u2581"
