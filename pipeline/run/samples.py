"""Many answers at once: N samples of one request drawn together in one batch, each with its own temperature and
seed, compared position by position.

The prompt is prefilled once (the captured prefill a single run makes, so the first scores are the same); its KV
cache is copied once per sample (prefill once, expand the cache) and the N answers are decoded together by the
BatchDecoder, one forward pass per step for all of them, each row leaving the batch at its own end token. Each sample
is its own `Answer` with GenerationOptions(temperature=t_i, seed=S + i): its own numpy generator seeded as a single
run's is, fed the same scores, so sample i chooses the tokens a separate `run_trace` with that seed and temperature
chooses, greedy and sampled alike, up to the batch's rounding: a batched pass's scores differ from a single pass's by
~1e-5 (fp32 on a CPU), which changes a sampled token only when its draw falls that close to the boundary between two
tokens' shares of the distribution (once in 8 x 32 draws in bench/branching_bench.py), and a greedy one only at a
near-tie.

Per position j (the j-th answer token of each sample still going there): the tokens chosen, whether they differ, and
how much the distributions each sample drew from there differ (pipeline.stages.disagreement.MEASURE).
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from pipeline.core.errors import InputError
from pipeline.model.interface import LanguageModel
from pipeline.stages.disagreement import MEASURE, mean_pairwise_js
from pipeline.stages.request import ChatRequest, GenerationOptions

MAX_SAMPLES = 8  # a batch of 8 short answers still decodes at about the speed of one on a small model
TOP_ALTERNATIVES = 5  # alternatives kept per token: what the page shows on a click


@dataclass(frozen=True)
class Alternative:
    id: int
    text: str
    prob: float  # softmax over V at temperature 1
    prob_drawn: float  # in the distribution this sample drew from (after its temperature and filters)


@dataclass
class Sample:
    seed: int
    temperature: float
    generated_token_ids: list[int]  # the end token included when the model chose it
    text: str
    finish_reason: str
    alternatives: list[list[Alternative]]  # per answer token: the TOP_ALTERNATIVES best, by raw score

    def to_json(self) -> dict:
        return {"seed": self.seed, "temperature": self.temperature, "generated_token_ids": self.generated_token_ids,
                "text": self.text, "finish_reason": self.finish_reason,
                "alternatives": [[a.__dict__ for a in row] for row in self.alternatives]}


@dataclass(frozen=True)
class Position:
    position: int  # j: the j-th answer token
    token_ids: tuple[int | None, ...]  # (N,) each sample's token there; None once the sample has ended
    disagree: bool  # the samples still going there chose more than one token
    divergence: float | None  # MEASURE over the samples still going there; None with fewer than two

    def to_json(self) -> dict:
        return {"position": self.position, "token_ids": list(self.token_ids), "disagree": self.disagree,
                "divergence": self.divergence}


@dataclass
class SampleSet:
    """N samples of one request drawn in one batch: compact (no (S, V) scores), so a page can store it."""

    prompt_ids: list[int]
    samples: list[Sample]
    positions: list[Position]
    draw_s: float  # the prefill and the batched decode: what drawing the samples cost
    compare_s: float  # the comparison per position, after the draw
    measure: str = field(default=MEASURE)

    @property
    def all_identical(self) -> bool:
        return len({tuple(s.generated_token_ids) for s in self.samples}) == 1

    def to_json(self) -> dict:
        return {"samples": [s.to_json() for s in self.samples], "positions": [p.to_json() for p in self.positions],
                "divergence_measure": self.measure, "all_identical": self.all_identical, "draw_s": self.draw_s,
                "compare_s": self.compare_s}


def check_count(n) -> int:
    """The number of samples, 1 to MAX_SAMPLES (InputError naming `samples` otherwise)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_SAMPLES:
        raise InputError("samples", f"must be a whole number from 1 to {MAX_SAMPLES}, got {n!r}.")
    return int(n)


def sample_options(options: GenerationOptions, temperatures: Sequence[float],
                   base_seed: int) -> list[GenerationOptions]:
    """Sample i's options: the request's, with temperatures[i] and seed base_seed + i (each checked as a request's)."""
    check_count(len(temperatures))
    return [replace(options, temperature=float(t), seed=int(base_seed) + i) for i, t in enumerate(temperatures)]


def draw_samples(request: ChatRequest, lm: LanguageModel, temperatures: Sequence[float], base_seed: int,
                 max_prompt_tokens: int | None = None) -> SampleSet:
    """len(temperatures) samples of `request` in one batch, sample i at temperatures[i] with seed base_seed + i."""
    from pipeline.run.trace import prefill_request
    from pipeline.stages.batched_decoding import decode_batch

    options = sample_options(request.options, temperatures, base_seed)
    t0 = time.perf_counter()
    started = prefill_request(request, lm, max_prompt_tokens, t0)  # once, for every sample
    caches = [started.kv_cache] + [copy.deepcopy(started.kv_cache) for _ in options[1:]]  # per layer (1, Hkv, T, Dh)
    ids = started.tokenized.ids
    decodes = decode_batch(lm, caches, [started.last_logits] * len(options), options,
                           [f"{started.rid}-s{o.seed}" for o in options], [started.prefill_started_at] * len(options),
                           [ids] * len(options))
    return compare(ids, decodes, options, time.perf_counter() - t0)


def compare(prompt_ids: list[int], decodes: list, options: list[GenerationOptions], draw_s: float) -> SampleSet:
    """The samples' record and their comparison per position, from their Decodes (each step_logits (S_i, V))."""
    from pipeline.stages.next_token import final_probs

    t0 = time.perf_counter()
    samples = [Sample(o.seed, o.temperature, list(d.generated_ids), d.text, str(d.finish_reason),
                      [[Alternative(c.id, c.text, c.prob, c.prob_after_filters) for c in s.top[:TOP_ALTERNATIVES]]
                       for s in d.steps])
               for d, o in zip(decodes, options)]
    positions = []
    for j in range(max(len(d.generated_ids) for d in decodes)):
        going = [i for i, d in enumerate(decodes) if j < len(d.generated_ids)]
        tokens = tuple(decodes[i].generated_ids[j] if i in going else None for i in range(len(decodes)))
        divergence = None
        if len(going) > 1:
            drawn = np.stack([final_probs(decodes[i].step_logits[j].astype(np.float64), options[i], prompt_ids,
                                          decodes[i].generated_ids[:j]) for i in going])  # (n, V)
            divergence = mean_pairwise_js(drawn)
        positions.append(Position(j, tokens, len({tokens[i] for i in going}) > 1, divergence))
    return SampleSet(list(prompt_ids), samples, positions, draw_s, time.perf_counter() - t0)
