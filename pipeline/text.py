"""Token text made readable: the one helper every view uses to show a token (minbpe's render_token).

Token text is untrusted: it may hold `<img ...>`, `<s>` or control characters. This module only
makes it readable; escaping it for HTML or plotly is the views' job (`ui/escape.py`).
"""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from .checks import token_ids

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
    token_id = token_ids("token_id", [token_id], vocab_size(tokenizer))[0]
    piece = tokenizer.convert_ids_to_tokens([token_id])[0]
    return piece if token_id in _special_ids(tokenizer) else piece_text(piece)


def tokens_text(tokenizer, ids) -> list[str]:
    """token_text for many ids at once."""
    special = _special_ids(tokenizer)
    ids = token_ids("token_ids", ids, vocab_size(tokenizer))
    pieces = tokenizer.convert_ids_to_tokens(ids)
    return [p if int(i) in special else piece_text(p) for i, p in zip(ids, pieces)]


def vocab_size(tokenizer) -> int:
    """Ids the tokenizer can name (added tokens included): 49,152 for SmolLM2. Computed once per tokenizer."""
    cached = getattr(tokenizer, "_tpe_vocab_size", None)
    if cached is None:
        cached = len(tokenizer)
        try:
            tokenizer._tpe_vocab_size = cached
        except AttributeError:
            pass
    return cached


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


# ---- tokens that are only part of a character ---------------------------------------------------
# Byte-level BPE cuts text into bytes, not characters: '토' (3 bytes in UTF-8) may be three tokens,
# each readable only as <0xED>, <0x86>, <0xA0>. The helpers below find, for every token, the
# character(s) its bytes belong to, so a page can name it '토 (1/3)' and still show its bytes.


@dataclass(frozen=True)
class Piece:
    """One token placed in the text it helps spell.

    A group is a run of tokens whose inner boundaries fall inside a character (a grapheme: what a
    reader sees as one character, e.g. 👩‍🔬 = 👩 + ZWJ + 🔬). A token whose bytes are whole
    characters is a group of one.
    """

    raw: bytes  # the token's own bytes
    text: str  # the token alone, readable ('<0xED>', '␣tom', '<|im_end|>')
    start: int  # byte span of the token in the joined bytes
    end: int
    group: int  # index of the first token of its group
    part: int  # 1-based place of the token in its group
    parts: int  # tokens in the group (1 = the token is whole characters)
    group_text: str  # the group's characters, readable ('토', '␣과', '👩‍🔬')
    char_start: int  # character span of the whole group in the decoded text
    char_end: int
    special: bool = False  # a control token: its text is its name, never grouped

    @property
    def partial(self) -> bool:
        return self.parts > 1

    @property
    def label(self) -> str:
        """'토 (1/3)' for a part of a character; the token's own text when it is whole."""
        return f"{self.group_text} ({self.part}/{self.parts})" if self.partial else self.text

    @property
    def with_bytes(self) -> str:
        """The label and, for part of a character, the bytes it really is: '토 (1/3) · bytes <0xED>'."""
        return f"{self.label} · bytes {self.text}" if self.partial else self.text

    @property
    def byte_hex(self) -> str:
        """b'\\xed\\x86' -> 'ED 86'"""
        return " ".join(f"{b:02X}" for b in self.raw)


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


def group_pieces(raws: list[bytes], special: list[bool] | None = None,
                 texts: list[str] | None = None) -> list[Piece]:
    """Place every token in the characters it spells. raws: each token's bytes, in order.

    special: tokens that are names, not text (kept whole; never grouped with a neighbour).
    texts: each token's readable text (default: render_bytes of its bytes).

    '토마' = ED 86 A0 | EB A7 88 cut as [b'\\xed', b'\\x86', b'\\xa0', b'\\xeb\\xa7\\x88'] ->
    labels ['토 (1/3)', '토 (2/3)', '토 (3/3)', '마'].
    """
    special = special or [False] * len(raws)
    texts = texts or [render_bytes(r) for r in raws]
    pieces: list[Piece] = []
    i = 0
    while i < len(raws):
        if special[i]:
            pieces.append(Piece(raws[i], texts[i], 0, 0, i, 1, 1, texts[i], 0, 0, special=True))
            i += 1
            continue
        j = i
        while j < len(raws) and not special[j]:
            j += 1
        pieces += _group_run(raws[i:j], texts[i:j], i)
        i = j
    # byte and character offsets over the whole sequence
    group_bytes: dict[int, bytes] = {}
    for p in pieces:
        group_bytes[p.group] = group_bytes.get(p.group, b"") + p.raw
    out, byte_at, char_at, groups_seen = [], 0, 0, {}
    for p in pieces:
        if p.group not in groups_seen:
            n_chars = len(_decoded(group_bytes[p.group]))
            groups_seen[p.group] = (char_at, char_at + n_chars)
            char_at += n_chars
        cs, ce = groups_seen[p.group]
        out.append(Piece(p.raw, p.text, byte_at, byte_at + len(p.raw), p.group, p.part, p.parts, p.group_text, cs, ce,
                         p.special))
        byte_at += len(p.raw)
    return out


def _decoded(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _group_run(raws: list[bytes], texts: list[str], offset: int) -> list[Piece]:
    """group_pieces for a run of ordinary (non-special) tokens; token indices start at `offset`."""
    joined = b"".join(raws)
    clusters = graphemes(joined)
    boundaries = {a for a, _, _ in clusters} | {len(joined)}
    bounds = [0]
    for r in raws:
        bounds.append(bounds[-1] + len(r))
    groups: list[list[int]] = []  # token indices (within the run) per group
    for t in range(len(raws)):
        if t == 0 or bounds[t] in boundaries:
            groups.append([t])
        else:
            groups[-1].append(t)
    out, c = [], 0
    for g in groups:
        b = bounds[g[-1] + 1]
        parts = []
        while c < len(clusters) and clusters[c][0] < b:  # groups end on cluster boundaries: walk once
            parts.append(clusters[c][2])
            c += 1
        text = "".join(parts)
        for k, t in enumerate(g):
            out.append(Piece(raws[t], texts[t], 0, 0, offset + g[0], k + 1, len(g), text, 0, 0))
    return out


def token_pieces(tokenizer, ids) -> list[Piece]:
    """group_pieces for token ids of `tokenizer` (special tokens keep their names)."""
    ids = token_ids("token_ids", ids, vocab_size(tokenizer))
    special = _special_ids(tokenizer)
    names = tokenizer.convert_ids_to_tokens(ids)
    flags = [i in special for i in ids]
    raws = [n.encode("utf-8") if f else piece_bytes(n) for n, f in zip(names, flags)]
    texts = [n if f else render_bytes(r) for n, f, r in zip(names, flags, raws)]
    return group_pieces(raws, flags, texts)


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


def spelled(pieces: list[Piece], upto: int | None = None) -> str:
    """The readable text of pieces[:upto]: whole characters as themselves, a character only partly there as
    its name and the parts present. Pieces of '토마' cut after 2 of 토's 3 tokens -> '토 (1–2/3)';
    all 4 -> '토마'."""
    shown = pieces[:len(pieces) if upto is None else upto]
    out, i = [], 0
    while i < len(shown):
        p = shown[i]
        j = i
        while j + 1 < len(shown) and shown[j + 1].group == p.group and not p.special:
            j += 1
        if p.special or not p.partial:
            out.append(p.text if p.special else p.group_text)
        elif shown[j].part == p.parts and p.part == 1:
            out.append(p.group_text)  # every part present: the character itself
        else:
            parts = f"{p.part}" if i == j else f"{p.part}–{shown[j].part}"
            out.append(f"{p.group_text} ({parts}/{p.parts})")
        i = j + 1
    return "".join(out)
