"""Every token placed in the characters it spells.

Byte-level BPE cuts text into bytes, not characters: '토' (3 bytes in UTF-8) may be three tokens,
each readable only as <0xED>, <0x86>, <0xA0>. `group_pieces` finds, for every token, the
character(s) its bytes belong to, so a page can name it '토 (1/3)' and still show its bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.checks import token_ids
from pipeline.text.byte_level import piece_bytes
from pipeline.text.graphemes import graphemes
from pipeline.text.per_tokenizer import special_ids, vocab_size
from pipeline.text.readable import render_bytes


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
    special = special_ids(tokenizer)
    names = tokenizer.convert_ids_to_tokens(ids)
    flags = [i in special for i in ids]
    raws = [n.encode("utf-8") if f else piece_bytes(n) for n, f in zip(names, flags)]
    texts = [n if f else render_bytes(r) for n, f, r in zip(names, flags, raws)]
    return group_pieces(raws, flags, texts)


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
