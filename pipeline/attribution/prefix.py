"""Patched runs that skip what they share: a patched pass recomputes only the positions its patch can change.

A causal model's position t reads positions <= t only. Clean and corrupted prompts agree up to their first
differing token d, so both runs are the same there, and a patch at position p changes nothing before p. A patched
pass therefore starts at s = max(d, first patched position): the corrupted run's KV cache of ids[:s] is computed
once, copied for each batch row, and each row runs ids[s:] after it. On a 613-token question changed near its end
the full map's rows run 48 positions instead of 613.

Work is counted in one unit, the same for every part of a job, so a part's time can be foreseen from another's:

    pass_work(rows, new, cached)  = rows x new x (1 + (cached + new / 2) / attention_span)
    attention_span(lm)            = the context length at which a token's attention (2 L H Dh multiply-adds per
                                    earlier position: scores and values) costs as much as its weights (the blocks'
                                    parameters): ~3,100 positions on SmolLM2
    a backward pass               = BACKWARD_COST x its forward (two matmuls per forward matmul)

SmolLM2 on this 2-core CPU: the units of one job's parts took within ~1.5x of one another's seconds per unit
(bench/RESULTS.md), where counting parts alone put a patched pass at 12x a plain one.
"""
from __future__ import annotations

import copy

from pipeline.core.long_jobs import Progress
from pipeline.model.interface import LanguageModel

BACKWARD_COST = 2.0  # a backward pass: about twice its forward's multiply-adds (gradients of inputs and weights)
# The batch rows' copies of the shared KV cache, at most this many bytes a pass (rows = this / one row's cache):
# 12 rows of a 600-token SmolLM2 prefix would copy 330 MB.
KV_COPY_BYTES = 128 * 2**20


def first_difference(a: list[int], b: list[int]) -> int:
    """The first position where the two lists differ; len(a) where they agree: [1, 2, 3], [1, 5, 3] -> 1."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))


def start_of(clean_ids: list[int], corrupted_ids: list[int], first_patched: int = 0) -> int:
    """Where patched passes start: no earlier than the first differing token and the first patched position, and
    at the last position at the latest (a pass reads the last position's logits)."""
    return min(max(first_difference(clean_ids, corrupted_ids), first_patched), len(clean_ids) - 1)


def attention_span(lm: LanguageModel) -> float:
    """The context length at which attention costs a token as much as the blocks' weights do (see above)."""
    m = lm.dims
    weights = sum(p.numel() for p in lm.model.model.layers.parameters())
    return weights / (2 * m.L * m.H * m.Dh)


def pass_work(lm: LanguageModel, rows: int, new: int, cached: int) -> float:
    """A forward pass of `rows` rows of `new` positions after `cached` ones, in work units (see above)."""
    return rows * new * (1 + (cached + new / 2) / attention_span(lm))


def rows_per_pass(lm: LanguageModel, cached: int, most: int) -> int:
    """Batch rows a pass may take: at most `most`, and as many as KV_COPY_BYTES of copied cache allows."""
    m = lm.dims
    row_bytes = max(1, cached) * m.L * 2 * m.Hkv * m.Dh * m.bytes_per_value
    return max(1, min(most, KV_COPY_BYTES // row_bytes))


def prefix_cache(lm: LanguageModel, ids: list[int]):
    """The KV cache of a plain pass over `ids` (None for no ids): what every patched row reads before its own part."""
    if not ids:
        return None
    return lm.forward([list(ids)], use_cache=True).cache


def row_cache(prefix, rows: int):
    """A fresh cache holding `rows` copies of `prefix` (a pass appends to its cache, so each pass needs its own).
    Its tensors are ordinary ones (the prefix's were made in inference mode), so a pass with gradients can read it."""
    if prefix is None:
        return None
    cache = copy.copy(prefix)
    cache.layers = [copy.copy(layer) for layer in prefix.layers]
    for layer in cache.layers:
        if layer.is_initialized and layer.keys.numel():
            layer.keys = layer.keys.repeat_interleave(rows, dim=0)
            layer.values = layer.values.repeat_interleave(rows, dim=0)
    return cache


class Work:
    """A job's progress in parts and in work units: `step(note, units)` after each part, the Progress to yield."""

    def __init__(self, parts: list[float]):
        self.parts = parts  # each part's work units, in order
        self.done = 0

    def step(self, note: str) -> Progress:
        self.done += 1
        return Progress(self.done, len(self.parts), note, work=(sum(self.parts[:self.done]), sum(self.parts)))
