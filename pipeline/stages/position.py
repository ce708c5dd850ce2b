"""Stage: position. Rotary position embedding (RoPE), recomputed with the model's real base and head width
(the maths itself: pipeline.model.rope).

Llama-style RoPE pairs dimension i with dimension i + Dh/2 (the "rotate half" layout) and turns
that pair by the angle  position * base ** (-2i / Dh).  Pair 0 turns fastest (1 radian per
position); the last pair turns slowest. Because both q and k are turned by their own position,
their dot product only sees the difference of the two angles, i.e. the relative distance.
"""
from __future__ import annotations

import numpy as np

from pipeline.core.checks import array, integer, number
from pipeline.core.errors import InputError
from pipeline.model import rope

MAX_POSITION = 2**24  # far past any context window; beyond it float64 angles lose whole radians


def inv_freq(head_dim: int, base: float) -> np.ndarray:
    """(Dh/2,) radians per position for each frequency pair, checked.  Dh=4, base=100 -> [1.0, 0.1]."""
    head_dim, base = integer("head_dim", head_dim, 2, 2**16), number("base", base, 1.0, 1e12)
    if head_dim % 2:
        raise InputError("head_dim", f"must be even (pairs of dimensions rotate together), got {head_dim}.")
    return rope.inv_freq(head_dim, base)


def angles(positions, head_dim: int, base: float) -> np.ndarray:
    """(P, Dh/2) rotation angle in radians for every position and frequency pair, checked."""
    pos = array("positions", positions, ndim=1, min_len=0)  # (P,)
    if not np.isfinite(pos).all() or np.abs(pos).max(initial=0) > MAX_POSITION:
        raise InputError("positions", f"must be whole positions within ±{MAX_POSITION:,}.")
    return pos[:, None] * inv_freq(head_dim, base)[None, :]  # (P, Dh/2)


def rotate(x: np.ndarray, positions, base: float) -> np.ndarray:
    """Apply RoPE to x (..., P, Dh) at the given positions (P,) in float64, exactly as the model does
    (pipeline.model.rope.rotate with tables for these positions)."""
    x = array("x", x, min_len=0)
    a = angles(positions, x.shape[-1], base)  # (P, Dh/2), checked
    if x.ndim < 2 or x.shape[-2] != len(a):
        raise InputError("positions", f"must give one position per row of x {x.shape}, got {len(a)}.")
    cos, sin = rope.cos_sin(positions, x.shape[-1], base)  # (P, Dh) each
    return rope.rotate(x, cos, rope.signed_sin(sin))


def unrotate(x_rot: np.ndarray, positions, base: float) -> np.ndarray:
    """Undo RoPE: the vector before rotation (turning back by the same angle)."""
    return rotate(x_rot, -array("positions", positions, ndim=1, min_len=0), base)


def shifted_scores(q: np.ndarray, k: np.ndarray, i: int, j: int, shifts, base: float) -> np.ndarray:
    """Score q.k/sqrt(Dh) with q placed at position i+s and k at j+s, for every shift s.

    q, k: (Dh,) pre-RoPE vectors. Returns (S,) — all equal (up to float rounding), since only
    the distance i - j matters.
    """
    q, k = _pair(q, k)
    out = []
    for s in array("shifts", shifts, ndim=1, min_len=0):
        qr = rotate(q[None], [i + s], base)[0]  # (Dh,)
        kr = rotate(k[None], [j + s], base)[0]  # (Dh,)
        out.append(float(qr @ kr) / np.sqrt(len(q)))
    return np.array(out)


def score_by_distance(q: np.ndarray, k: np.ndarray, distances, base: float) -> np.ndarray:
    """(N,) score of the same q, k when the key sits `d` positions before the query."""
    q, k = _pair(q, k)
    kr = rotate(k[None], [0], base)[0]  # (Dh,) key at position 0
    qr = rotate(np.repeat(q[None], len(distances), axis=0), distances, base)  # (N, Dh) query at d
    return qr @ kr / np.sqrt(len(q))


def pre_rope(prefill, layer: int, q_head: int, kv_head: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    """Pre-RoPE q (T, Dh) of one query head and k (T, Dh) of one KV head, from the captured
    post-RoPE tensors turned back by their own positions."""
    T = prefill.q_rot.shape[2]
    q = unrotate(prefill.q_rot[layer, q_head], np.arange(T), base)  # (T, Dh)
    k = unrotate(prefill.k_rot[layer, kv_head], np.arange(T), base)  # (T, Dh)
    return q, k


def layer_pre_rope(prefill, dims, layer: int, q_head: int) -> tuple[np.ndarray, np.ndarray]:
    """Pre-RoPE q (T, Dh) of query head `q_head` and k (T, Dh) of the KV head it reads, in `layer`, turned back with
    that layer's own base (dims.rope_base_of: Gemma 3 turns its full layers with 1,000,000, the others with 10,000)."""
    return pre_rope(prefill, layer, q_head, dims.kv_head(q_head), dims.rope_base_of(layer))


def _pair(q, k) -> tuple[np.ndarray, np.ndarray]:
    """q and k: (Dh,) each, the same Dh."""
    q, k = array("q", q, ndim=1), array("k", k, ndim=1)
    if q.shape != k.shape:
        raise InputError("k", f"must have q's width {q.shape[0]}, got {k.shape[0]}.")
    return q, k
