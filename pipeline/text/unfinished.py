"""Tokens that start or end inside a character: a candidate named after what it does to an unfinished
character ('<0xA0> → 토'), and the bytes an answer cut by the token limit ends inside."""
from __future__ import annotations

from pipeline.text.graphemes import utf8_chars, utf8_length
from pipeline.text.pieces import token_pieces
from pipeline.text.readable import render_text


def continuation_label(tokenizer, context_ids, token_id: int, short: bool = False) -> str:
    """Name a candidate next token after `context_ids`, saying what it does to an unfinished character.

    After a context ending in b'\\xed\\x86': '<0xA0> → 토' (it completes the character); with no
    unfinished character: '<0xED> (byte 1 of 3)' (it starts one); '␣the' (whole text) stays '␣the'.
    short=True (a heatmap cell): '→토' and '<0xED>…'.
    """
    cand = token_pieces(tokenizer, [token_id])[0]
    continues = bool(cand.raw) and utf8_length(cand.raw[0]) == 0 and 0x80 <= cand.raw[0] <= 0xBF
    pending = b""
    if continues and len(context_ids):
        pending = _unfinished_tail(b"".join(p.raw for p in token_pieces(tokenizer, list(context_ids)[-4:])))
    joined = pending + cand.raw
    after = _unfinished_tail(joined)
    if not pending and not after and not continues:
        return cand.text
    done = render_text("".join(ch for a, b, ch in utf8_chars(joined[:len(joined) - len(after)])
                               if ch is not None and b > len(pending)))
    if short:  # for a heatmap cell: '→토' completes a character, '<0xED>…' leaves one unfinished
        return f"{cand.text}…" if after or not done else f"→{done}"
    if after:
        where = f"byte {len(after)} of {utf8_length(after[0])}"
        return f"{cand.text} → {done} + ({where})" if done else f"{cand.text} ({where})"
    if done:
        return f"{cand.text} → {done}"
    return f"{cand.text} (continues a character)"


def _unfinished_tail(raw: bytes) -> bytes:
    """The last bytes of `raw` that start a UTF-8 character without finishing it (b'' if none).
    b'a\\xed\\x86' -> b'\\xed\\x86';  b'\\xed\\x86\\xa0' -> b''"""
    for back in range(1, min(4, len(raw)) + 1):
        lead = raw[-back]
        n = utf8_length(lead)
        if n == 0:
            continue  # a continuation byte: look further back for its lead
        return raw[-back:] if back < n else b""
    return b""


def unfinished_end(tokenizer, ids) -> bytes:
    """The bytes of a character the tokens end inside of (b'' when they end on a whole character):
    an answer cut by the token limit after the first 2 bytes of '토' -> b'\\xed\\x86'. Control tokens are skipped."""
    ids = list(ids)[-4:]  # a UTF-8 character has at most 4 bytes, so at most 4 tokens matter
    return _unfinished_tail(b"".join(p.raw for p in token_pieces(tokenizer, ids) if not p.special))



def candidate_label(tokenizer, context_ids, token_id: int, answer_ids=()) -> str:
    """A first-token candidate named as Journey names it: the token the answer began with as its piece of the answer
    ('토 (1/3) · bytes <0xED>': the next tokens spell the rest of the character), any other after the prompt
    (continuation_label: '<0xEC> (byte 1 of 3)'; '␣the' stays '␣the')."""
    answer_ids = list(answer_ids)
    if answer_ids and token_id == answer_ids[0]:
        return token_pieces(tokenizer, answer_ids[:4])[0].with_bytes  # a character has at most 4 bytes
    return continuation_label(tokenizer, context_ids, token_id)
