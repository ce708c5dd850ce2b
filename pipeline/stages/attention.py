"""Stage: attention. Which earlier tokens each token reads from, per layer and head, computed from
the captured prefill, and one head's attention worked by hand on a few tokens.

Shape letters: L layers, H query heads, Hkv key/value heads, T positions, W shown rows, Dh head width.
"""
from __future__ import annotations

import numpy as np

from ..maths import softmax
from ..model.prefill import Prefill


def attention_for_layer(prefill: Prefill, layer: int, first_row: int = 0) -> np.ndarray:
    """(H, T - first_row, T) attention weights of one layer for query rows first_row..T-1:
    softmax(q k^T / sqrt(Dh) + causal mask), in float32.

    Uses the stored pattern when kept; otherwise recomputes just those rows from the captured
    post-RoPE q and k. Query head h reads key/value head h // (H // Hkv) (grouped-query attention).
    """
    if prefill.attention is not None:
        return np.ascontiguousarray(prefill.attention[layer][:, first_row:], dtype=np.float32)
    q = prefill.q_rot[layer][:, first_row:].astype(np.float32)  # (H, W, Dh)
    k = prefill.k_rot[layer].astype(np.float32)  # (Hkv, T, Dh)
    k = np.repeat(k, q.shape[0] // k.shape[0], axis=0)  # (H, T, Dh)
    scores = q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(q.shape[-1]))  # (H, W, T)
    T = scores.shape[-1]
    future = np.arange(T)[None, :] > np.arange(first_row, T)[:, None]  # (W, T) key after its query
    scores[:, future] = -np.inf
    return softmax(scores).astype(np.float32)  # (H, W, T)


def attention_by_hand(q_rot: np.ndarray, k_rot: np.ndarray, v: np.ndarray, head: int, positions) -> dict:
    """One head's attention restricted to a few chosen positions, step by step.

    q_rot (H, T, Dh), k_rot and v (Hkv, T, Dh) of one layer; positions ascending, e.g. [3, 7, 9, 12].
    Returns compare (n, n) raw q.k/sqrt(Dh), masked (n, n) with -inf above the diagonal,
    weights (n, n) softmax of each row over the chosen positions only, mixed (n, Dh) = weights @ v.
    """
    pos = np.asarray(sorted(positions))
    kv = head // (q_rot.shape[0] // k_rot.shape[0])  # GQA: query head -> its key/value head
    q = q_rot[head, pos].astype(np.float64)  # (n, Dh)
    k = k_rot[kv, pos].astype(np.float64)  # (n, Dh)
    vals = v[kv, pos].astype(np.float64)  # (n, Dh)
    compare = q @ k.T / np.sqrt(q.shape[-1])  # (n, n)
    masked = np.where(np.tril(np.ones_like(compare, dtype=bool)), compare, -np.inf)
    weights = softmax(masked)  # (n, n)
    return {"positions": pos, "kv_head": kv, "compare": compare, "masked": masked, "weights": weights,
            "values": vals, "mixed": weights @ vals}


def weight_before(rows: np.ndarray, start: int) -> np.ndarray:
    """(W, T) rows -> (W,) share of each row's weight on keys before position `start`."""
    return rows[:, :start].sum(axis=-1)
