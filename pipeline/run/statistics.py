"""Statistics of a finished run: the log-probability of each chosen token and of the whole answer."""
from __future__ import annotations

import numpy as np

from pipeline.run.record import Trace


def step_log_probabilities(trace: Trace) -> list[float]:
    """log P(chosen token) at each step of the answer, at temperature 1 over all V (a forced token
    counts like any other)."""
    from pipeline.core.maths import softmax

    return [float(np.log(max(softmax(row.astype(np.float64))[s.token_id], 1e-300)))
            for row, s in zip(trace.step_logits, trace.steps)]


def log_probability(trace: Trace) -> float:
    """Sum of log P(chosen token) over the answer: how likely the model found the whole path."""
    return float(sum(step_log_probabilities(trace)))


def mean_log_probability(trace: Trace, start: int = 0) -> float:
    """Mean log P(chosen token) per step from `start` to the end: paths of different lengths compare
    like with like (a total only grows more negative with every token).  [-0.1, -2.3, -0.5], start 1 -> -1.4"""
    lp = step_log_probabilities(trace)[start:]
    return float(np.mean(lp)) if lp else 0.0
