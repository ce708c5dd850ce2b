"""Turning logits into a chosen token: temperature, top-k, top-p, min-p, then a draw.

Every filter stage is kept so a page can show the distribution before and after each one.
Worked example (seed article): logits [3, 2.2, 1.6, 1.1, -1.5] -> [54, 24, 13, 8, 0.6] %.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import InputError
from .options import GenerationOptions

STAGE_NAMES = ("softmax", "temperature", "top_k", "top_p", "min_p")


@dataclass(frozen=True)
class Stage:
    name: str  # one of STAGE_NAMES
    probs: np.ndarray  # (V,) float64, sums to 1, zeros where filtered out
    kept: int  # candidates still allowed after this stage


def softmax(logits: np.ndarray) -> np.ndarray:
    """(V,) -> (V,); -inf entries get probability 0."""
    x = np.asarray(logits, dtype=np.float64)
    finite = np.isfinite(x)
    if not finite.any():
        raise InputError("logits", "every candidate is masked out (-inf); nothing can be drawn.")
    e = np.zeros_like(x)
    e[finite] = np.exp(x[finite] - x[finite].max())
    return e / e.sum()


def _renorm(p: np.ndarray, keep: np.ndarray) -> np.ndarray:
    out = np.where(keep, p, 0.0)
    return out / out.sum()


def filter_stages(logits: np.ndarray, options: GenerationOptions) -> list[Stage]:
    """Apply temperature -> top-k -> top-p -> min-p (the order HF's samplers use).

    temperature 0 is greedy: all mass on the best token.
    """
    options.validate()
    raw = softmax(logits)
    stages = [Stage("softmax", raw, int((raw > 0).sum()))]
    if options.temperature == 0:
        p = np.zeros_like(raw)
        p[int(np.argmax(raw))] = 1.0
    else:
        p = softmax(np.asarray(logits, dtype=np.float64) / options.temperature)
    stages.append(Stage("temperature", p, int((p > 0).sum())))
    if options.top_k > 0 and options.top_k < (p > 0).sum():
        best = np.argpartition(-p, options.top_k - 1)[: options.top_k]  # the k largest, unordered
        keep = np.zeros(p.shape, dtype=bool)
        keep[best] = True
        p = _renorm(p, keep)
    stages.append(Stage("top_k", p, int((p > 0).sum())))
    if options.top_p < 1.0:
        alive = np.flatnonzero(p)  # sort only the candidates still in play (few after top-k)
        order = alive[np.argsort(-p[alive], kind="stable")]
        before = np.cumsum(p[order]) - p[order]  # mass of the better candidates
        keep = np.zeros(p.shape, dtype=bool)
        keep[order[before < options.top_p]] = True  # keep until the running total reaches top_p
        p = _renorm(p, keep)
    stages.append(Stage("top_p", p, int((p > 0).sum())))
    if options.min_p > 0:
        p = _renorm(p, p >= options.min_p * p.max())
    stages.append(Stage("min_p", p, int((p > 0).sum())))
    return stages


def final_probs(logits: np.ndarray, options: GenerationOptions) -> np.ndarray:
    return filter_stages(logits, options)[-1].probs


def draw(probs: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n independent draws, vectorized: inverse CDF with one searchsorted, no Python loop."""
    if n < 0:
        raise InputError("draws", f"must be 0 or more, got {n}.")
    cdf = np.cumsum(probs)
    picks = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
    return np.minimum(picks, len(probs) - 1)


def empirical(draws: np.ndarray, size: int) -> np.ndarray:
    """Share of draws that landed on each id: (V,)."""
    return np.bincount(draws, minlength=size) / max(len(draws), 1)


def mask_logits(logits: np.ndarray, allowed_ids) -> np.ndarray:
    """Constrained output: every id not allowed gets -inf, so its probability is exactly 0."""
    out = np.full(np.shape(logits), -np.inf)
    allowed = np.asarray(list(allowed_ids), dtype=np.int64)
    out[allowed] = np.asarray(logits, dtype=np.float64)[allowed]
    return out
