"""How far apart two correct float32 computations of the same value can be: the tolerance of every test that
compares two code paths (ours against HF's, one row against a batch, a recomputation against the record).

Why they differ at all: a sum x_1 + ... + x_n (a dot product, one entry of a matmul, a mean, a softmax's
denominator) is rounded after each addition, and torch adds the terms in an order, in blocks and with fused
multiply-adds that depend on its kernel, which it picks by the CPU (`ATEN_CPU_CAPABILITY`: AVX-512, AVX2 or none)
and by the tensors' shapes (one row or a batch). Two orders give two roundings of the same exact sum.

How far: each addition's rounding error is at most u = 2^-24 (float32's unit roundoff) times the partial sum, so
at most u times the terms' absolute sum M = |x_1| + ... + |x_n| (for a dot product of x and w: M = |x| . |w|).
The worst case adds n such errors of one sign (n u M: Higham, *Accuracy and Stability of Numerical Algorithms*,
2nd ed., section 4.2), but the errors of round-to-nearest are as often up as down: treated as independent,
mean-zero and bounded by u M, their sum exceeds lam sqrt(n) u M with probability at most 2 exp(-lam^2 / 2)
(Hoeffding; the rounding-error analysis of Higham and Mary, SIAM J. Sci. Comput. 41(5), 2019, theorem 2.4).
With lam = 8 that is 2.5e-14 a value, so a test comparing a million values fails by chance once in 4e7 runs,
while the bound stays sqrt(n) times tighter than the worst case (39 times for SmolLM2's MLP, n = 1,536): a
tolerance n u M for a whole model would let a 1 % error through.

Two computations, each with its own roundings: 2n errors. A chain of `depth` sums, each fed the one before (a
model's blocks one after the other, each adding its write to the residual stream): depth x 2n errors, to first
order, provided the steps between pass an error on without amplifying it (an assumption for a whole model, not a
theorem: a norm divides by its input's size, attention's softmax can sharpen; the numeric tests' second pass
under another CPU capability is what checks it, docs/testing.md). So

    float32_tolerance(n, M, depth) = lam sqrt(2 n depth) u M

`magnitude` M is the largest absolute sum of terms along the chain, computed from the run's own numbers where a
test can (`abs_dot`), else the compared values' own scale (their largest absolute value) when the sums behind
them cancel little. A test that means "exactly equal" compares the same computation with `==`, never with a
tolerance.
"""
from __future__ import annotations

import math
import os

import numpy as np

U32 = 2.0 ** -24  # float32's unit roundoff: half the gap between 1 and the next float32 (eps 2^-23)
U64 = 2.0 ** -53  # float64's
LAM = 8.0  # a chance bound: 2 exp(-LAM^2 / 2) = 2.5e-14 per compared value


def _tolerance(u: float, n_terms: int, magnitude: float, depth: int) -> float:
    if n_terms < 1 or depth < 1 or not magnitude >= 0:
        raise ValueError(f"n_terms and depth at least 1, magnitude at least 0: {n_terms}, {depth}, {magnitude}")
    return LAM * math.sqrt(2 * n_terms * depth) * u * float(magnitude)


def float32_tolerance(n_terms: int, magnitude: float, depth: int = 1) -> float:
    """The most two float32 computations of one value may differ by: sums of `n_terms` terms whose absolute
    values add up to at most `magnitude`, `depth` of them chained. E.g. one dot product of width 576 with
    |x| . |w| = 8: float32_tolerance(576, 8) = 8 * sqrt(1152) * 2^-24 * 8 = 1.3e-4."""
    return _tolerance(U32, n_terms, magnitude, depth)


def float64_tolerance(n_terms: int, magnitude: float, depth: int = 1) -> float:
    """float32_tolerance's formula with float64's roundoff: a comparison computed in float64 throughout."""
    return _tolerance(U64, n_terms, magnitude, depth)


def forward_tolerance(dims, magnitude: float, positions: int, layers: int | None = None) -> float:
    """A value at the end of `layers` blocks of a model with dimensions `dims` (default: all of them, then the
    final norm and unembedding): each block's attention and MLP add one write to the stream, whose longest sum is
    the MLP's down projection (D_mlp terms), the attention's mix over `positions` or a projection of width D."""
    n = max(dims.D, dims.D_mlp or dims.D, dims.H * dims.Dh, positions)
    depth = 2 * (dims.L if layers is None else layers) + (1 if layers is None else 0)
    return float32_tolerance(n, magnitude, max(depth, 1))


def abs_dot(x, w) -> np.ndarray:
    """|x| . |w|^T in float64: each dot product's terms' absolute sum (the `magnitude` of x @ w.T)."""
    return np.abs(np.asarray(x, dtype=np.float64)) @ np.abs(np.asarray(w, dtype=np.float64)).T


def scale(*arrays) -> float:
    """The largest absolute value among `arrays` (torch tensors or arrays): the compared values' own scale."""
    return max(float(np.abs(np.asarray(_numpy(a), dtype=np.float64)).max(initial=0.0)) for a in arrays)


def _numpy(a):
    return a.detach().cpu().double().numpy() if hasattr(a, "detach") else a


def assert_within(actual, expected, tol, what: str = "") -> None:
    """|actual - expected| <= tol everywhere (tol a number or an array broadcast against them); on failure the
    worst value, its difference and its tolerance."""
    a = np.asarray(_numpy(actual), dtype=np.float64)
    e = np.asarray(_numpy(expected), dtype=np.float64)
    assert a.shape == e.shape, f"{what}: shapes {a.shape} and {e.shape}"
    t = np.broadcast_to(np.asarray(tol, dtype=np.float64), a.shape)
    diff = np.abs(a - e)
    bad = ~(diff <= t)  # NaN counts as outside
    _log_margin(what, diff, t)
    if bad.any():
        i = np.unravel_index(int(np.argmax(np.where(bad, diff / np.maximum(t, 1e-300), 0))), a.shape) if a.ndim else ()
        raise AssertionError(f"{what}: {int(bad.sum())} of {a.size} values differ beyond the tolerance; worst at "
                             f"{i}: {a[i]!r} against {e[i]!r}, off by {diff[i]:.3g}, tolerance {t[i]:.3g}")


def _log_margin(what: str, diff: np.ndarray, tol: np.ndarray) -> None:
    """With TPE_TOLERANCE_LOG=FILE: append the largest share of its tolerance a comparison used (how much room the
    derived tolerance leaves on this CPU; docs/testing.md)."""
    path = os.environ.get("TPE_TOLERANCE_LOG")
    if path and diff.size:
        used = float(np.max(diff / np.maximum(tol, 1e-300)))
        with open(path, "a") as f:
            f.write(f"{os.environ.get('PYTEST_CURRENT_TEST', '?').split(' ')[0]}\t{what}\t{used:.3g}\n")


def logits_tolerance(lm, ids, tokens, position: int = -1) -> float:
    """How far two float32 passes of `ids` through `lm` may put the logits of `tokens` at `position` apart (each
    of them, or any difference of them): forward_tolerance with magnitude |x| . (|W_U[t_1]| + ...), x the final
    norm's output there (what the unembedding reads, caught by a hook on it)."""
    import torch

    seen = []
    head = lm.model.get_output_embeddings()
    handle = head.register_forward_pre_hook(lambda _m, args: seen.append(args[0][0, position].detach()))
    try:
        with torch.no_grad():
            lm.model(torch.tensor([list(ids)], device=lm.device), use_cache=False)
    finally:
        handle.remove()
    x = seen[0].double().cpu().numpy()
    w = head.weight[list(tokens)].detach().double().cpu().numpy()
    return forward_tolerance(lm.dims, float(np.abs(x) @ np.abs(w).sum(0)), len(ids))
