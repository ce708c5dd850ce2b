"""The few numeric helpers several stages share, written once."""
from __future__ import annotations

import numpy as np


def softmax(x, axis: int = -1) -> np.ndarray:
    """Probabilities along `axis`, computed stably in float64; -inf entries get exactly 0.

    [3, 2.2, 1.6, 1.1, -1.5] -> [0.54, 0.24, 0.13, 0.08, 0.006]. A row that is all -inf stays all 0
    (callers that must draw from it check `.sum()`).
    """
    x = np.asarray(x, dtype=np.float64)
    top = np.max(x, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)  # all -inf row: avoid inf - inf
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x - top)
    e = np.where(np.isfinite(x), e, 0.0)
    total = e.sum(axis=axis, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)
