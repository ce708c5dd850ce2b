"""Stage: embeddings. The embedding table as a space: neighbours by cosine, analogies, a 2-D PCA map.

Words are looked up with a leading space (" tomato"), the form they take inside a sentence.
A word the tokenizer splits into several tokens is represented by the mean of its rows; every
result says how many tokens it used (`pieces`), so a page can tell the user.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.core.checks import array, integer
from pipeline.core.errors import InputError
from pipeline.stages.request import MAX_MESSAGE_CHARS, check_text
from pipeline.stages.tokens import encode
from pipeline.text.byte_level import piece_bytes
from pipeline.text.per_tokenizer import per_tokenizer
from pipeline.text.token_names import tokens_text

MAX_WORD_CHARS = 200  # one word (or phrase) looked up
MAX_WORD_LIST_CHARS = MAX_MESSAGE_CHARS  # a typed list of words, before it is cut into words


@dataclass(frozen=True)
class WordVector:
    word: str
    ids: list[int]  # token ids the word became
    pieces: list[str]  # readable token texts
    vector: np.ndarray  # (D,) the row, or the mean of the rows for a multi-token word

    @property
    def split(self) -> bool:
        return len(self.ids) > 1


def unit_rows(table: np.ndarray) -> np.ndarray:
    """(V, D) -> (V, D) every row scaled to length 1, so a dot product is a cosine."""
    table = array("table", table, ndim=2, dtype=np.float32)
    norms = np.linalg.norm(table, axis=1, keepdims=True)
    return table / np.maximum(norms, 1e-12)


def word_vector(tokenizer, table: np.ndarray, word: str, leading_space: bool = True) -> WordVector:
    text = check_text("word", word, limit=MAX_WORD_CHARS).strip()
    if not text:
        raise InputError("word", "give a word.")
    table = array("table", table, ndim=2, dtype=None)  # as it is: a float64 copy was 1.3 GB a word on Gemma
    ids = encode(tokenizer, (" " + text) if leading_space else text)
    if not ids or max(ids) >= len(table):
        raise InputError("table", f"has {len(table):,} rows; {text!r} needs row {max(ids, default=0):,}.")
    rows = np.asarray(table[ids], dtype=np.float32)  # (n, D)
    return WordVector(text, list(ids), tokens_text(tokenizer, ids), rows.mean(axis=0))


def _top(unit: np.ndarray, tokenizer, vector: np.ndarray, k: int, exclude=()) -> list[dict]:
    v = vector / max(float(np.linalg.norm(vector)), 1e-12)
    sims = unit @ v.astype(np.float32)  # (V,)
    if exclude:
        sims = sims.copy()
        sims[list(exclude)] = -np.inf
    best = np.argpartition(-sims, k)[:k]
    best = best[np.argsort(-sims[best])]
    texts = tokens_text(tokenizer, best)
    return [{"id": int(i), "text": text, "cosine": float(sims[i])} for i, text in zip(best, texts)]


def neighbours(unit: np.ndarray, tokenizer, table: np.ndarray, word: str, k: int = 10) -> tuple[WordVector, list[dict]]:
    """The k rows closest to the word by cosine (the word's own token included, so it comes first
    when the word is one token)."""
    wv = word_vector(tokenizer, table, word)
    return wv, _top(_unit_like(unit, table), tokenizer, wv.vector, integer("k", k, 0))


def analogy(unit: np.ndarray, tokenizer, table: np.ndarray, a: str, b: str, c: str, k: int = 10,
            exclude_inputs: bool = True) -> tuple[list[WordVector], list[dict]]:
    """a - b + c (e.g. king - man + woman), on unit-length vectors. By default the inputs are left out
    of the results (they would otherwise win): their own tokens, and every other spelling of an input
    word (' Paris', 'Paris', ' paris', 'PARIS' ...: see `same_word_ids`)."""
    wa, wb, wc = (word_vector(tokenizer, table, w) for w in (a, b, c))
    unit_of = lambda w: w.vector / max(float(np.linalg.norm(w.vector)), 1e-12)  # noqa: E731
    target = unit_of(wa) - unit_of(wb) + unit_of(wc)  # (D,)
    exclude = set()
    if exclude_inputs:
        exclude = set(wa.ids) | set(wb.ids) | set(wc.ids) | same_word_ids(tokenizer, (a, b, c))
    return [wa, wb, wc], _top(_unit_like(unit, table), tokenizer, target, integer("k", k, 0), exclude)


def _unit_like(unit, table) -> np.ndarray:
    """`unit` must be unit_rows(table): the same (V, D)."""
    unit = array("unit", unit, ndim=2, dtype=np.float32)
    if unit.shape != np.shape(table):
        raise InputError("unit", f"must be unit_rows(table), shape {np.shape(table)}, got {unit.shape}.")
    return unit


def word_key(text: str) -> str:
    """How two spellings of one word compare: stripped and lower-cased. ' Paris' -> 'paris'."""
    return text.strip().casefold()


def same_word_ids(tokenizer, words) -> set[int]:
    """Every token whose text, stripped and lower-cased, equals one of `words`.
    ['Paris'] -> the ids of ' Paris', 'Paris', ' paris', 'paris', ... (those the vocabulary has)."""
    keys = {word_key(check_text("words", w, limit=MAX_WORD_CHARS)) for w in words} - {""}
    by_key = _vocabulary_keys(tokenizer)
    return {i for key in keys for i in by_key.get(key, ())}


def _vocabulary_keys(tokenizer) -> dict[str, list[int]]:
    """word_key of every token's text -> its ids; computed once per tokenizer (V entries, ~0.3 s)."""
    def compute() -> dict[str, list[int]]:
        keys: dict[str, list[int]] = {}
        for i, piece in enumerate(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))):
            if piece is not None:
                keys.setdefault(word_key(piece_bytes(piece).decode("utf-8", errors="replace")), []).append(i)
        return keys

    return per_tokenizer(tokenizer, "word_keys", compute)


def label_positions(coords: np.ndarray, near: float = 0.08) -> list[str]:
    """A plotly textposition per point so neighbours' labels do not sit on each other.

    coords (N, 2). A point whose nearest neighbour (in units of the plot's width and height) is
    closer than `near` puts its label on the side away from it: left/right when the neighbour is
    beside it, above/below when it is over or under it. [[0, 0], [0.01, 0], [5, 5]] ->
    ['middle left', 'middle right', 'top center'].
    """
    xy = array("coords", coords, ndim=2, min_len=0)
    if xy.shape[1] != 2:
        raise InputError("coords", f"must be (N, 2), got {xy.shape}.")
    if len(xy) < 2:
        return ["top center"] * len(xy)
    span = np.maximum(xy.max(axis=0) - xy.min(axis=0), 1e-12)
    u = (xy - xy.min(axis=0)) / span  # (N, 2) in [0, 1]
    d = np.linalg.norm(u[:, None] - u[None], axis=-1)  # (N, N)
    np.fill_diagonal(d, np.inf)
    out = []
    for i in range(len(u)):
        j = int(np.argmin(d[i]))
        if d[i, j] >= near:
            out.append("top center")
            continue
        dx, dy = u[i] - u[j]
        if abs(dx) >= abs(dy):
            out.append("middle right" if dx > 0 or (dx == 0 and i > j) else "middle left")
        else:
            out.append("top center" if dy > 0 else "bottom center")
    return out


def pca_2d(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N, D) -> ((N, 2) coordinates, (2,) share of the variance each axis explains)."""
    x = array("vectors", vectors, ndim=2)
    if not np.isfinite(x).all():
        raise InputError("vectors", "must be finite numbers.")
    x = x - x.mean(axis=0, keepdims=True)
    _, s, vt = np.linalg.svd(x, full_matrices=False)
    coords = x @ vt[:2].T  # (N, 2)
    var = s ** 2
    share = var[:2] / max(var.sum(), 1e-12)
    if coords.shape[1] < 2:  # a single word: pad so the map still draws
        coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
        share = np.pad(share, (0, 2 - len(share)))
    return coords, share


def parse_words(text: str) -> list[str]:
    """'tomato, apple\\nking' -> ['tomato', 'apple', 'king'] (duplicates dropped, order kept); each word at most
    MAX_WORD_CHARS characters."""
    text = check_text("words", text, MAX_WORD_LIST_CHARS)
    words = [w.strip() for chunk in text.splitlines() for w in chunk.split(",")]
    long = next((w for w in words if len(w) > MAX_WORD_CHARS), None)
    if long is not None:
        raise InputError("words", f"the word {long[:20]!r}… is {len(long):,} characters; a word has at most "
                                  f"{MAX_WORD_CHARS}.")
    return list(dict.fromkeys(w for w in words if w))
