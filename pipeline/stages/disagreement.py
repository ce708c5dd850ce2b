"""How much several samples' next-token distributions differ at one position: the mean pairwise Jensen–Shannon
divergence, in bits.

    JS(P, Q) = H(M) - (H(P) + H(Q)) / 2,   M = (P + Q) / 2,   H(P) = -sum p log2 p

It is 0 when the two distributions are the same and 1 bit when they share no token; symmetric, and finite where KL is
not (a token one sample could not draw). Over N distributions the measure is the mean over the N (N - 1) / 2 pairs,
so it stays in [0, 1] whatever N is. Worked example: P = [1, 0], Q = [0.5, 0.5] -> M = [0.75, 0.25],
H(M) = 0.811, H(P) = 0, H(Q) = 1, JS = 0.811 - 0.5 = 0.311 bits.
"""
from __future__ import annotations

import numpy as np

from pipeline.core.checks import array

MEASURE = ("mean pairwise Jensen–Shannon divergence, in bits (0 = the same distribution, 1 = no token in common), "
           "between the distributions the samples drew their token from there (each after its own temperature and "
           "filters)")


def entropy_bits(p: np.ndarray) -> np.ndarray:
    """(..., V) probabilities -> (...,) entropy in bits; a probability of 0 adds nothing."""
    log_p = np.zeros_like(p)
    np.log2(p, out=log_p, where=p > 0)
    return -(p * log_p).sum(axis=-1)


def mean_pairwise_js(probs: np.ndarray) -> float:
    """(N, V) distributions, N >= 2 -> the mean JS divergence (bits) over every pair of rows.

    [[1, 0], [0.5, 0.5]] -> 0.311; [[1, 0], [0, 1]] -> 1.0; identical rows -> 0.0."""
    p = array("probs", probs, ndim=2).astype(np.float64)  # (N, V)
    n = len(p)
    if n < 2:
        raise ValueError("a divergence needs at least two distributions")
    own = entropy_bits(p)  # (N,)
    i, j = np.triu_indices(n, k=1)  # the N (N - 1) / 2 pairs
    mixed = entropy_bits((p[i] + p[j]) / 2)  # (pairs,)
    js = mixed - (own[i] + own[j]) / 2  # (pairs,)
    return float(np.clip(js, 0.0, 1.0).mean())  # rounding can leave -1e-16 or 1 + 1e-16
