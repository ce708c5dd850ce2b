"""Stage: attention. Which earlier tokens each token reads from, per layer and head, computed from
the captured prefill, and one head's attention worked by hand on a few tokens.

Shape letters: L layers, H query heads, Hkv key/value heads, T positions, W shown rows, Dh head width.
"""
from __future__ import annotations

import numpy as np

from pipeline.core.checks import array, integer, token_ids
from pipeline.core.errors import InputError
from pipeline.core.maths import softmax
from pipeline.model.prefill_record import Prefill


def hidden_keys(queries, keys, window: int | None) -> np.ndarray:
    """(len(queries), len(keys)) True where a query may not read a key: the key comes after it, or (in a
    sliding-window layer) it lies `window` or more positions back. queries [600], keys [0, 88, 89, 601],
    window 512 -> [[True, True, False, True]]: 600 - 88 = 512 is out, 600 - 89 = 511 is the oldest kept."""
    q = np.asarray(queries, dtype=np.int64)[:, None]
    k = np.asarray(keys, dtype=np.int64)[None, :]
    return (k > q) | (q - k >= window) if window else k > q


def attention_for_layer(prefill: Prefill, layer: int, first_row: int = 0, window: int | None = None,
                        head: int | None = None) -> np.ndarray:
    """(H, T - first_row, T) attention weights of one layer for query rows first_row..T-1:
    softmax(q k^T / sqrt(Dh) + mask), in float32. The mask hides later keys and, in a sliding-window
    layer (`window`: dims.window(layer)), keys `window` or more positions back: their weight is 0.
    With `head`, only that query head: (1, T - first_row, T).

    Uses the stored pattern when kept; otherwise recomputes just those rows from the captured
    post-RoPE q and k. Query head h reads key/value head h // (H // Hkv) (grouped-query attention).
    """
    H, Hkv = prefill.q_rot.shape[1], prefill.k_rot.shape[1]
    heads = slice(None) if head is None else slice(head, head + 1)
    if prefill.attention is not None:
        return np.ascontiguousarray(prefill.attention[layer][heads, first_row:], dtype=np.float32)
    kv = slice(None) if head is None else slice(head // (H // Hkv), head // (H // Hkv) + 1)
    q = prefill.q_rot[layer][heads, first_row:].astype(np.float32)  # (H, W, Dh)
    k = prefill.k_rot[layer][kv].astype(np.float32)  # (Hkv, T, Dh)
    k = np.repeat(k, q.shape[0] // k.shape[0], axis=0)  # (H, T, Dh)
    scores = q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(q.shape[-1]))  # (H, W, T)
    T = scores.shape[-1]
    scores[:, hidden_keys(np.arange(first_row, T), np.arange(T), window)] = -np.inf  # (W, T) masked
    return softmax(scores).astype(np.float32)  # (H, W, T)


def attention_by_hand(q_rot: np.ndarray, k_rot: np.ndarray, v: np.ndarray, head: int, positions,
                      window: int | None = None) -> dict:
    """One head's attention restricted to a few chosen positions, step by step.

    q_rot (H, T, Dh), k_rot and v (Hkv, T, Dh) of one layer; positions ascending, e.g. [3, 7, 9, 12];
    window: the layer's sliding window (None: a full layer).
    Returns compare (n, n) raw q.k/sqrt(Dh), masked (n, n) with -inf above the diagonal (and where a
    key lies `window` or more positions before its query),
    weights (n, n) softmax of each row over the chosen positions only, mixed (n, Dh) = weights @ v.
    """
    q_rot, k_rot, v = (array(n, x, ndim=3, dtype=None) for n, x in (("q_rot", q_rot), ("k_rot", k_rot), ("v", v)))
    if k_rot.shape != v.shape or q_rot.shape[1:] != k_rot.shape[1:] or q_rot.shape[0] % k_rot.shape[0]:
        raise InputError("k_rot", f"shapes do not fit: q_rot {q_rot.shape}, k_rot {k_rot.shape}, v {v.shape}.")
    head = integer("head", head, 0, q_rot.shape[0] - 1)
    pos = np.asarray(sorted(token_ids("positions", positions, q_rot.shape[1])), dtype=np.int64)
    if not len(pos):
        raise InputError("positions", "pick at least one position.")
    kv = head // (q_rot.shape[0] // k_rot.shape[0])  # GQA: query head -> its key/value head
    q = q_rot[head, pos].astype(np.float64)  # (n, Dh)
    k = k_rot[kv, pos].astype(np.float64)  # (n, Dh)
    vals = v[kv, pos].astype(np.float64)  # (n, Dh)
    compare = q @ k.T / np.sqrt(q.shape[-1])  # (n, n)
    masked = np.where(hidden_keys(pos, pos, window), -np.inf, compare)
    weights = softmax(masked)  # (n, n)
    return {"positions": pos, "kv_head": kv, "compare": compare, "masked": masked, "weights": weights,
            "values": vals, "mixed": weights @ vals}


def pooled_head(prefill: Prefill, layer: int, head: int, window: int | None = None,
                cells: int = 128) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One head's whole (T, T) pattern shrunk to at most cells x cells blocks of b = ceil(T / cells)
    positions, so a long prompt's band fits on screen: block (i, j) = the mean over the queries in block i
    of the weight they put on the keys in block j (each block row still sums to 1).

    Returns (pooled (n, n), hidden (n, n) True where every query-key pair of the block is masked — the
    future, or in a sliding layer `window` or more back —, starts (n,) the first position of each block).
    """
    T = prefill.T
    b = -(-T // integer("cells", cells, 1, 4096))
    starts = np.arange(0, T, b)
    A = attention_for_layer(prefill, layer, window=window, head=head)[0]  # (T, T)
    keys = np.add.reduceat(A, starts, axis=1)  # (T, n) weight on each block of keys
    pooled = np.add.reduceat(keys, starts, axis=0) / np.diff(np.append(starts, T))[:, None]  # (n, n)
    shown = ~hidden_keys(np.arange(T), np.arange(T), window)  # (T, T) pairs that may carry weight
    open_ = np.add.reduceat(np.add.reduceat(shown, starts, axis=1), starts, axis=0) > 0  # (n, n)
    return pooled.astype(np.float32), ~open_, starts


def _window_of(windows, layer: int) -> int | None:
    return windows[layer] if windows is not None else None


def last_rows(prefill: Prefill, windows=None) -> np.ndarray:
    """(L, H, T) the last query's attention in every layer and head (cheap even without the stored
    pattern: one query row per head). windows: (L,) each layer's sliding window or None, as
    [dims.window(i) for i in range(L)]; None: every layer full."""
    if prefill.attention is not None:
        return np.asarray(prefill.attention[:, :, -1], dtype=np.float32)
    return np.stack([attention_for_layer(prefill, layer, first_row=prefill.T - 1,
                                         window=_window_of(windows, layer))[:, 0]
                     for layer in range(prefill.q_rot.shape[0])])


def kv_sharing(H: int, Hkv: int) -> str:
    """How the query heads share key/value heads: (9, 3) -> 'grouped-query'; (4, 1) -> 'multi-query' (one
    key/value head for all); (8, 8) -> 'multi-head' (each query head its own)."""
    return "multi-head" if Hkv == H else "multi-query" if Hkv == 1 else "grouped-query"


def layer_kind(window: int | None) -> str:
    """A layer's attention in a few words: None -> 'full'; 512 -> 'sliding 512'."""
    return "full" if window is None else f"sliding {window}"


def entropy_bits(rows: np.ndarray) -> np.ndarray:
    """Entropy in bits along the last axis. [0.5, 0.5, 0, 0] -> 1.0; [1, 0, 0] -> 0.0; uniform over
    8 -> 3.0. Low = the head looks at a few tokens; high = it spreads its attention thin."""
    p = np.asarray(rows, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(p > 0, p * np.log2(p), 0.0).sum(axis=-1)


def sharpest_head(rows: np.ndarray, sinks: int = 1) -> tuple[int, int]:
    """(layer, head) whose last-row attention has the lowest entropy, among heads whose favourite
    key is not one of the first `sinks` tokens (a head parked on token 0, an attention sink, shows a
    single stripe). rows: (L, H, T) as from `last_rows`; falls back to the overall lowest."""
    rows = array("rows", rows, ndim=3)
    ent = entropy_bits(rows)  # (L, H)
    parked = rows.argmax(axis=-1) < sinks  # (L, H)
    pick = np.where(parked, np.inf, ent) if not parked.all() else ent
    layer, head = np.unravel_index(int(np.argmin(pick)), pick.shape)
    return int(layer), int(head)


def overview_tiles(prefill: Prefill, n: int = 24, windows=None) -> np.ndarray:
    """(L, H, n, n) every head's attention among the last n positions (queries and keys T-n..T-1):
    the small multiples of an all-heads overview. Weights are the real ones (rows do not renormalise
    over the tiles, so weight on earlier tokens is simply not drawn). windows: as for `last_rows`."""
    T = prefill.T
    n = min(n, T)
    if prefill.attention is not None:
        return np.asarray(prefill.attention[:, :, T - n:, T - n:], dtype=np.float32)
    return np.stack([attention_for_layer(prefill, layer, first_row=T - n,
                                         window=_window_of(windows, layer))[:, :, T - n:]
                     for layer in range(prefill.q_rot.shape[0])])


def tile_grid(tiles: np.ndarray, gap: int = 1) -> np.ndarray:
    """(L, H, n, n) -> (L*(n+gap) - gap, H*(n+gap) - gap) one image with NaN gutters between heads:
    row block l, column block h is head h of layer l. Drawing one heatmap is far quicker than L x H."""
    L, H, n, _ = array("tiles", tiles, ndim=4).shape
    gap = integer("gap", gap, 0, 64)
    out = np.full((L * (n + gap) - gap, H * (n + gap) - gap), np.nan, dtype=np.float32)
    for layer in range(L):
        for head in range(H):
            r, c = layer * (n + gap), head * (n + gap)
            out[r:r + n, c:c + n] = np.where(np.tril(np.ones((n, n), dtype=bool)), tiles[layer, head], np.nan)
    return out


def windowed(rows: np.ndarray, start: int, sinks: int) -> tuple[np.ndarray, int]:
    """Columns for a long prompt's grid: the first `sinks` keys (where much of the weight goes), one
    column with keys sinks..start-1 summed, then keys start..T-1.

    rows (..., W, T) for queries start..T-1 -> ((..., W, sinks + 1 + W), sinks actually kept).
    With nothing between the sinks and the window (start <= sinks) the rows are cut at 0 instead:
    ((..., W, T), 0). Each output row still sums to the input row's total.
    """
    rows = array("rows", rows, dtype=None, min_len=0)
    T = rows.shape[-1]
    start, sinks = integer("start", start, 0, T), integer("sinks", sinks, 0)
    sinks = min(sinks, start)
    if start - sinks <= 0:
        return rows, 0
    middle = rows[..., sinks:start].sum(axis=-1, keepdims=True)  # (..., W, 1)
    return np.concatenate([rows[..., :sinks], middle, rows[..., start:T]], axis=-1), sinks


SCALES = ("linear", "sqrt", "log")


def colour_values(weights: np.ndarray, scale: str, floor: float = 1e-4) -> tuple[np.ndarray, list[float], list[str]]:
    """Map weights in [0, 1] onto a colour axis that shows small weights, with ticks in weights.

    linear: as is. sqrt: 1 % -> 0.1, 25 % -> 0.5. log: log10(max(w, floor)): 0.01 % .. 100 % -> -4 .. 0.
    Returns (values, tick positions, tick texts). NaN stays NaN.
    """
    w = np.asarray(weights, dtype=np.float32)
    ticks = [0.0001, 0.001, 0.01, 0.1, 1.0] if scale == "log" else [0.0, 0.01, 0.05, 0.25, 0.5, 1.0] \
        if scale == "sqrt" else [0.0, 0.25, 0.5, 0.75, 1.0]
    texts = [f"{t * 100:g} %" for t in ticks]
    if scale == "sqrt":
        return np.sqrt(np.clip(w, 0, None)), [float(np.sqrt(t)) for t in ticks], texts
    if scale == "log":
        with np.errstate(invalid="ignore"):
            return np.log10(np.maximum(w, floor)), [float(np.log10(t)) for t in ticks], texts
    return w, ticks, texts
