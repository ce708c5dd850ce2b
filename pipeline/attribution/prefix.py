"""Patched runs that skip what they share: a patched pass recomputes only the positions its patch can change.

A causal model's position t reads positions <= t only. Clean and corrupted prompts agree up to their first
differing token d, so both runs are the same there, and a patch at position p changes nothing before p. A patched
pass therefore starts at s = max(d, first patched position): the corrupted run's KV cache of ids[:s] is computed
once and shown to every batch row (never copied: each layer joins it to the rows' own keys while it runs), and
each row runs ids[s:] after it. On a 613-token question changed near its end
the full map's rows run 48 positions instead of 613.

Work is counted in one unit, the same for every part of a job, so a part's time can be foreseen from another's:

    pass_work(rows, new, cached)  = rows x new x (1 + (cached + new / 2) / attention_span)
    attention_span(lm)            = the context length at which a token's attention (2 L H Dh multiply-adds per
                                    earlier position: scores and values) costs as much as its weights (the blocks'
                                    parameters): ~3,100 positions on SmolLM2
    a backward pass               = BACKWARD_COST x its forward (two matmuls per forward matmul)

A job's plan lists its parts as (kind, work units); `measured` times each part as it runs and forecasts the
seconds left from the kinds' measured seconds per unit (`forecast`: a patched pass has a fixed cost a plain run
spreads over many more tokens, so each kind keeps its own rate); `expected_s` says before a job starts how long it
should take, from the latest job's rates (bench/long_patching_bench.py measures how far off both were).
"""
from __future__ import annotations

import copy
import time
from dataclasses import replace

from pipeline.core.long_jobs import Steps
from pipeline.model.interface import LanguageModel

BACKWARD_COST = 2.0  # a backward pass: about twice its forward's multiply-adds (gradients of inputs and weights)
# One layer's keys and values of a pass's rows (the shared prefix joined to each row's own) take at most this many
# bytes: 12 rows of a 613-token SmolLM2 question take 11 MB; copying the whole prefix cache per row took 330 MB.
KV_COPY_BYTES = 128 * 2**20
_spans: dict[str, float] = {}  # model name -> attention_span
_rates: dict[tuple[str, str], float] = {}  # (model name, part kind) -> seconds per work unit, latest measured


def start_of(shared: int, T: int, first_patched: int = 0) -> int:
    """Where patched passes over T positions start, the clean and corrupted prompts sharing their first `shared`
    tokens (common_prefix_len, pipeline.core.common_prefix): no earlier than the first differing token and the first
    patched position, and at the last position at the latest (a pass reads the last position's logits)."""
    return min(max(shared, first_patched), T - 1)


def attention_span(lm: LanguageModel) -> float:
    """The context length at which attention costs a token as much as the blocks' weights do (see above)."""
    m = lm.dims
    if m.name not in _spans:  # every part of every plan reads it
        _spans[m.name] = sum(p.numel() for p in lm.model.model.layers.parameters()) / (2 * m.L * m.H * m.Dh)
    return _spans[m.name]


def pass_work(lm: LanguageModel, rows: int, new: int, cached: int) -> float:
    """A forward pass of `rows` rows of `new` positions after `cached` ones, in work units (see above)."""
    return rows * new * (1 + (cached + new / 2) / attention_span(lm))


def rows_per_pass(lm: LanguageModel, cached: int, most: int, new: int = 0) -> int:
    """Batch rows a pass may take: at most `most`, and as many as KV_COPY_BYTES of one layer's keys and values (the
    shared prefix's and the rows' own, joined while that layer runs) allow."""
    m = lm.dims
    row_bytes = max(1, cached + new) * 2 * m.Hkv * m.Dh * m.bytes_per_value
    return max(1, min(most, KV_COPY_BYTES // row_bytes))


def prefix_cache(lm: LanguageModel, ids: list[int]):
    """The KV cache of a plain pass over `ids` (None for no ids): what every patched row reads before its own part."""
    if not ids:
        return None
    return lm.forward([list(ids)], use_cache=True).cache


def _read_only_update(layer, key_states, value_states, *args, **kwargs):
    """A cache layer's update that joins the shared prefix (one row, broadcast to the pass's rows) to this pass's
    keys and values and keeps nothing: the prefix is never copied per row, and the same cache serves every pass."""
    import torch

    if not layer.is_initialized or layer.keys.numel() == 0:
        return key_states, value_states
    rows = key_states.shape[0]
    keys = torch.cat([layer.keys.expand(rows, -1, -1, -1).to(key_states.dtype), key_states], dim=-2)
    values = torch.cat([layer.values.expand(rows, -1, -1, -1).to(value_states.dtype), value_states], dim=-2)
    return keys, values


def row_cache(prefix, rows: int = 1):
    """A cache that shows `prefix` to every row of a pass without copying it and without growing (each layer's
    update joins the prefix to the pass's own keys and values and keeps nothing): what a patched pass runs after.
    The positions and the masks read the prefix's length, as after a plain pass over it (a sliding layer keeps its
    window's last positions, as the plain cache did)."""
    if prefix is None:
        return None
    import types

    cache = copy.copy(prefix)
    cache.layers = [copy.copy(layer) for layer in prefix.layers]
    for layer in cache.layers:
        layer.update = types.MethodType(_read_only_update, layer)
    return cache


Part = tuple[str, float]  # (kind: "plain", "backward" or "patched", work units): one part of a job's plan


def forecast(plan: list[Part], seconds: list[float], prior: dict[str, float] | None = None) -> float:
    """The seconds the parts of `plan` after the first len(seconds) will take, from those parts' measured seconds:
    a part of a kind already run at that kind's measured seconds per unit; one of a kind not run yet at the seconds
    per unit of all the parts so far, or, given `prior` (each kind's seconds per unit in an earlier job, maybe under
    another load), at its prior rate scaled by how this job's parts so far compare with their prior rates (the kinds'
    relative costs hold from job to job where the load does not). Passes of one kind cost in proportion to their
    work; kinds differ (a batch of patched rows costs more per unit than one long plain run, ~2x here).

        forecast([("plain", 10), ("patched", 20), ("patched", 20)], [1.0, 4.0]) -> 4.0
        forecast([("plain", 10), ("patched", 20)], [1.0], {"plain": 0.2, "patched": 0.4}) -> 4.0"""
    done = plan[:len(seconds)]
    overall = sum(seconds) / max(sum(w for _, w in done), 1e-12)
    if prior and done and all(k in prior for k, _ in done):
        scale = sum(seconds) / max(sum(w * prior[k] for k, w in done), 1e-12)
        unseen = {k: prior[k] * scale for k in prior}
    else:
        unseen = {}
    rates = {}
    for kind in {k for k, _ in done}:
        units = sum(w for k, w in done if k == kind)
        rates[kind] = sum(t for (k, _), t in zip(done, seconds) if k == kind) / max(units, 1e-12)
    return sum(w * rates.get(k, unseen.get(k, overall)) for k, w in plan[len(seconds):])


def measured(lm: LanguageModel, plan: list[Part], steps: Steps) -> Steps:
    """`steps` (a job that yields one Progress per part of `plan`), each part timed while it runs (not while the job
    waits in the queue), its Progress given the work done and the forecast of the seconds left; each kind's seconds
    per unit kept as this model's latest measure (expected_s)."""
    seconds: list[float] = []
    total = sum(w for _, w in plan)
    prior = {k: r for (name, k), r in _rates.items() if name == lm.dims.name}  # the latest job's, before this one
    try:
        while True:
            t = time.perf_counter()
            try:
                p = next(steps)
            except StopIteration as end:
                return end.value
            seconds.append(time.perf_counter() - t)
            kind, units = plan[len(seconds) - 1]
            if units > 0:
                _rates[lm.dims.name, kind] = seconds[-1] / units
            done = sum(w for _, w in plan[:len(seconds)])
            yield replace(p, work=(done, total), left_s=forecast(plan, seconds, prior))
    finally:
        steps.close()


def measured_here(lm: LanguageModel) -> bool:
    """Whether a patching job of this model has run here (expected_s then reads its rates, not the fallback)."""
    return any(name == lm.dims.name for name, _ in _rates)


def expected_s(lm: LanguageModel, plan: list[Part], fallback: float | None = None) -> float | None:
    """The seconds `plan` should take here, before it starts: each part at its kind's seconds per unit measured in
    this model's latest patching job here, else at any kind's, else at `fallback` seconds per unit (None: nothing
    measured yet)."""
    mine = {k: r for (name, k), r in _rates.items() if name == lm.dims.name}
    if not mine and fallback is None:
        return None
    any_rate = max(mine.values()) if mine else fallback
    return sum(w * mine.get(k, any_rate) for k, w in plan)
