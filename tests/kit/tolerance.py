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
while the bound stays sqrt(2n) / 8 times tighter than the worst case (7 times for SmolLM2's MLP, n = 1,536; 90
times over Gemma's vocabulary): the worst case for SmolLM2's whole forward pass would let a 1 % error through.
The chance model holds for the sums torch and numpy compute (vector lanes, then blocks or pairs: few additions
into any one accumulator; test_tolerance.py checks them at every size the models have); one sequential loop
over like terms breaks it past ~10^4 of them (0.1 added 49,152 times drifts 3 times past it).

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


def _tolerance(u: float, n_terms: int, magnitude, depth: int):
    """One tolerance, or one per magnitude where magnitude is an array (each value's own sum of terms)."""
    m = np.asarray(magnitude, dtype=np.float64)
    if n_terms < 1 or depth < 1 or not np.all(m >= 0):
        raise ValueError(f"n_terms and depth at least 1, magnitude at least 0: {n_terms}, {depth}, {magnitude}")
    t = LAM * math.sqrt(2 * n_terms * depth) * u * m
    return float(t) if t.ndim == 0 else t


def float32_tolerance(n_terms: int, magnitude, depth: int = 1):
    """The most two float32 computations of one value may differ by: sums of `n_terms` terms whose absolute
    values add up to at most `magnitude` (a number, or an array: a tolerance per value), `depth` of them chained.
    E.g. one dot product of width 576 with |x| . |w| = 8: float32_tolerance(576, 8) = 8 sqrt(1152) 2^-24 8 =
    1.3e-4."""
    return _tolerance(U32, n_terms, magnitude, depth)


def float64_tolerance(n_terms: int, magnitude, depth: int = 1):
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
    return np.abs(np.asarray(_numpy(x), dtype=np.float64)) @ np.abs(np.asarray(_numpy(w), dtype=np.float64)).T


def scale(*arrays) -> float:
    """The largest absolute value among `arrays` (torch tensors or arrays): the compared values' own scale."""
    return max(float(np.abs(np.asarray(_numpy(a), dtype=np.float64)).max(initial=0.0)) for a in arrays)


def _numpy(a):
    return a.detach().cpu().double().numpy() if hasattr(a, "detach") else a


def assert_within(actual, expected, tol, what: str = "") -> None:
    """|actual - expected| <= tol everywhere (tol, and expected, a number or an array of actual's shape); on
    failure the worst value, its difference and its tolerance."""
    a = np.asarray(_numpy(actual), dtype=np.float64)
    e = np.asarray(_numpy(expected), dtype=np.float64)
    if e.ndim == 0:  # one expected value for every one (a row's sum: 1)
        e = np.broadcast_to(e, a.shape)
    assert a.shape == e.shape, f"{what}: shapes {a.shape} and {e.shape}"
    t = np.broadcast_to(np.asarray(tol, dtype=np.float64), a.shape)
    diff = np.abs(a - e)
    bad = ~(diff <= t)  # NaN counts as outside
    _log_margin(what, diff, t)
    if bad.any():
        worst = int(np.argmax(np.where(bad, diff / np.maximum(t, 1e-300), 0)))
        i = tuple(int(k) for k in np.unravel_index(worst, a.shape))
        raise AssertionError(f"{what}: {int(bad.sum())} of {a.size} values differ beyond the tolerance; worst at "
                             f"{i}: {float(a[i])!r} against {float(e[i])!r}, off by {float(diff[i]):.3g}, "
                             f"tolerance {float(t[i]):.3g}")


def _log_margin(what: str, diff: np.ndarray, tol: np.ndarray) -> None:
    """With TPE_TOLERANCE_LOG=FILE: append the test, the comparison, the largest share of its tolerance it used (how
    much room the derived tolerance leaves on this CPU; docs/testing.md), the largest difference and tolerance."""
    path = os.environ.get("TPE_TOLERANCE_LOG")
    if path and diff.size:
        used = float(np.max(diff / np.maximum(tol, 1e-300)))
        with open(path, "a") as f:
            f.write(f"{os.environ.get('PYTEST_CURRENT_TEST', '?').split(' ')[0]}\t{what}\t{used:.3g}\t"
                    f"{float(diff.max()):.3g}\t{float(tol.max()):.3g}\n")


def final_norm_output(lm, ids, position: int = -1) -> np.ndarray:
    """(D,) what the unembedding reads at `position` in a plain pass of `ids` (a hook on it), float64."""
    import torch

    seen = []
    handle = lm.model.get_output_embeddings().register_forward_pre_hook(
        lambda _m, args: seen.append(args[0][0, position].detach()))
    try:
        with torch.no_grad():
            lm.model(torch.tensor([list(ids)], device=lm.device), use_cache=False)
    finally:
        handle.remove()
    return seen[0].double().cpu().numpy()


def unembedding_magnitude(lm, x, tokens=None) -> np.ndarray:
    """|x| . |W_U[t]| for every token t (or those of `tokens`): each logit's terms' absolute sum for the final norm's
    output x, (D,) -> (V,) or (n, D) -> (n, V) (in chunks of rows: Gemma's W_U is 262,144 x 640)."""
    import torch

    w = lm.model.get_output_embeddings().weight.detach()
    if tokens is not None:
        w = w[torch.as_tensor(list(tokens), dtype=torch.long, device=w.device)]  # (n_tokens, D)
    x = np.asarray(x, dtype=np.float32)
    ax = torch.from_numpy(np.abs(x.reshape(-1, x.shape[-1]))).to(w.device)  # (n, D)
    out = np.concatenate([(w[i:i + 16384].abs().float() @ ax.T).double().cpu().numpy()
                          for i in range(0, w.shape[0], 16384)])  # (V, n): slices of rows, no index lists
    return out[:, 0] if x.ndim == 1 else out.T.reshape(*x.shape[:-1], w.shape[0])


def logits_with_tolerance(lm, ids, position: int = -1) -> tuple:
    """(logits (V,) of a plain HF pass of `ids` at `position`, as a torch tensor; logits_tolerance for them) from one
    pass: the final norm's output read by a hook on the unembedding while the logits are computed."""
    import torch

    seen = []
    handle = lm.model.get_output_embeddings().register_forward_pre_hook(
        lambda _m, args: seen.append(args[0][0, position].detach()))
    try:
        with torch.no_grad():
            logits = lm.model(torch.tensor([list(ids)], device=lm.device), use_cache=False).logits[0, position]
    finally:
        handle.remove()
    x = seen[0].double().cpu().numpy()
    return logits, forward_tolerance(lm.dims, 1.0, len(ids)) * unembedding_magnitude(lm, x)


def logits_tolerance(lm, ids, tokens=None, position: int = -1) -> np.ndarray:
    """How far two float32 passes of `ids` through `lm` may put each logit at `position` apart ((V,), or one per
    token of `tokens`; a difference of two logits: their sum): forward_tolerance with magnitude |x| . |W_U[t]|."""
    x = final_norm_output(lm, ids, position)
    return forward_tolerance(lm.dims, 1.0, len(ids)) * unembedding_magnitude(lm, x, tokens)


def attention_tolerance(q, k, scale: float, positions: int, input_error: float = 0.0) -> float:
    """How far two float32 computations of softmax(q . k * scale) over `positions` keys may differ: a score has
    Dh terms, |q . k| <= |q| |k| bounds their absolute sum (plus `input_error`, a relative error q and k each
    carry: float16 storage 2^-11, another pass's forward_tolerance(dims, 1, T, layers)); a weight p moves by at
    most p (ds_i + max ds) <= 2 max ds, and the softmax's own sum of `positions` terms (each at most 1) rounds
    once more."""
    qn = float(np.linalg.norm(np.asarray(_numpy(q), dtype=np.float64), axis=-1).max())
    kn = float(np.linalg.norm(np.asarray(_numpy(k), dtype=np.float64), axis=-1).max())
    Dh = np.shape(q)[-1]
    score = float32_tolerance(Dh, qn * kn * scale) + 2 * input_error * qn * kn * scale
    return 2 * score + float32_tolerance(positions, 1.0, depth=2)


U16 = 2.0 ** -11  # float16's unit roundoff: what storing a float32 value compactly costs it, relative


def assert_same_best(ids, reference_ids, reference_top2, tol, what: str = "") -> None:
    """The same best token at each position as the reference (ids (P,), reference_top2 (P, 2) its two best
    logits), except where the reference's two best are within 2 tol of each other: there two correct float32
    computations may choose either."""
    ids, ref, top2 = np.asarray(ids), np.asarray(reference_ids), np.asarray(reference_top2, dtype=np.float64)
    differ = ids != ref
    tie = top2[:, 0] - top2[:, 1] <= 2 * np.asarray(tol)
    assert not np.any(differ & ~tie), f"{what}: other best tokens at {np.flatnonzero(differ & ~tie).tolist()}"


def lens_tolerance(lm, final_norm) -> float:
    """How far a logit from the final norm and the head, recomputed (the norm's mean over D, then D terms), may be
    from the model's: the largest |x| . |W_U[t]| over the positions of `final_norm` (P, D) and every token."""
    return float32_tolerance(lm.dims.D, 1.0, depth=2) * float(unembedding_magnitude(lm, final_norm).max())


def any_logit_tolerance(lm, positions: int) -> float:
    """logits_tolerance for any position and token, from the weights alone: the final norm's output x has
    |x| <= sqrt(D) max|g| (an RMSNorm's output before its gain g has norm sqrt(D) at most), so
    |x| . |W_U[t]| <= |x| |W_U[t]| <= sqrt(D) max|g| max_t |W_U[t]| (Cauchy-Schwarz). For scores of many steps
    (a decode's step logits), where each step's own pass is not at hand."""
    import torch

    from pipeline.model.capture import final_norm_scale

    g = float(final_norm_scale(lm.model).detach().abs().max())
    w = float(torch.linalg.vector_norm(lm.model.get_output_embeddings().weight.detach().float(), dim=1).max())
    return forward_tolerance(lm.dims, math.sqrt(lm.dims.D) * g * w, positions)


def agreed_steps(tokens, reference, reference_scores, tol, what: str = "") -> int:
    """Two greedy answers of one prompt by two float32 computations: the same tokens, except that from a step
    where the reference's two best scores (reference_scores (steps, V)) are within 2 tol of each other either may
    be chosen and the answers part. The number of steps they share (compare scores over those only)."""
    tokens, reference = list(tokens), list(reference)
    n = next((i for i, (a, b) in enumerate(zip(tokens, reference)) if a != b), min(len(tokens), len(reference)))
    if n < max(len(tokens), len(reference)):
        if n == min(len(tokens), len(reference)):  # one ended where the other went on: the end token's own choice
            step = np.asarray(reference_scores[min(n, len(reference_scores) - 1)], dtype=np.float64)
        else:
            step = np.asarray(reference_scores[n], dtype=np.float64)
        best2 = np.sort(step)[-2:]
        assert best2[1] - best2[0] <= 2 * tol, (f"{what}: the answers part at step {n} ({tokens[n:n + 3]} against "
                                                f"{reference[n:n + 3]}), where the best score leads by "
                                                f"{best2[1] - best2[0]:.3g}, beyond rounding ({2 * tol:.3g})")
    return n


def rope_tolerance(x, positions: int) -> float:
    """How far a float32 RoPE rotation of x (..., Dh) over `positions` positions may be from an exact one: the
    angle p f is a float32 product (p < positions, f <= 1: off by 2 u p at most) whose cos and sin round once
    more (u each), turning each pair (|pair| <= sqrt 2 max|x|) by that much, and x cos + y sin rounds twice."""
    return U32 * (2 * positions + 4) * math.sqrt(2) * scale(x)


def attention_write_magnitude(rec, lm, layer: int, position: int = -1) -> np.ndarray:
    """(D,) the absolute sum of the terms of layer's attention write at `position` in an attribution record
    (pipeline.attribution.record): sum over h, k, s of |W_O[d, hk]| a_hs |v_s,hk| (times Gemma's frozen
    post-norm scale), which bounds both routes to it: z = sum_s a_s v_s through W_O, and each source through W_O."""
    from pipeline.attribution.record import weights

    _, _, _, w_o, post = weights(lm)
    H, Hkv, Dh = lm.dims.H, lm.dims.Hkv, lm.dims.Dh
    t = position % rec.resid.shape[1]
    v = np.abs(rec.v[layer, :t + 1].astype(np.float64)).reshape(t + 1, Hkv, Dh)[:, np.arange(H) // (H // Hkv)]
    a = rec.pattern[layer, :, t, :t + 1].astype(np.float64)  # (H, T)
    av = np.einsum("hs,shk->hk", a, v).reshape(-1)  # (H Dh,)
    m = np.abs(w_o[layer].numpy().astype(np.float64)) @ av
    return m if post is None else m * np.abs(rec.post_scale[layer, t] * post[layer].numpy())


def stream_tolerance(rec, position: int = -1) -> np.ndarray:
    """(D,) how far the model's own last stream may be from the exact sum of the record's parts (embedding, each
    block's attention and MLP writes): each block adds its two writes with two float32 roundings, u |h + attn| and
    u |h + attn + mlp|."""
    h = rec.resid[:, position].astype(np.float64)  # (L + 1, D)
    return (U32 * (np.abs(h[:-1] + rec.attn[:, position]) + np.abs(h[1:]))).sum(0)


def parts_tolerance(rec, u, position: int = -1) -> float:
    """How far the parts of an attribution read through u (D,) (float64) may add up from the model's own logit:
    the stream's additions (stream_tolerance), then the model's final norm (a mean over D) and head (D terms)."""
    au = np.abs(np.asarray(u, dtype=np.float64))
    last = np.abs(rec.resid[-1, position].astype(np.float64))
    return float(stream_tolerance(rec, position) @ au) + float32_tolerance(len(au), float(last @ au), depth=2)


def reading(rec, lm, *tokens) -> np.ndarray:
    """(D,) |W_U[t1]| + ... through an attribution record's frozen final norm (r g at its last position): what the
    absolute terms of a part read as a logit (or a difference of logits) are multiplied by (parts_tolerance's u)."""
    from pipeline.attribution.dla import frozen_norm

    w = lm.model.get_output_embeddings().weight.detach()
    return sum(np.abs(w[t].double().cpu().numpy()) for t in tokens) * np.abs(frozen_norm(rec, lm))


def logprob_tolerance(lm, positions: int) -> float:
    """How far two float32 passes may put a token's log-probability (or a mean of them, a loss) apart: its logit
    and the largest other one each within any_logit_tolerance, and the log-sum-exp's own sum of V terms."""
    return 2 * any_logit_tolerance(lm, positions) + float32_tolerance(lm.dims.V, 1.0, depth=2)


def heads_tolerance(rec, lm, layer) -> np.ndarray:
    """(D,) the heads' writes (float64 from z) against the attention's own (the model's float32: z sums T
    sources, o_proj H Dh terms; Gemma: then its post-norm, a mean over D) at the last position."""
    from pipeline.attribution.record import is_gemma

    T, HDh = rec.resid.shape[1], lm.dims.H * lm.dims.Dh
    norm = float32_tolerance(lm.dims.D, 1.0, depth=2) * np.abs(rec.attn[layer, -1]) if is_gemma(lm) else 0.0
    return float32_tolerance(max(T, HDh), 1.0, depth=2) * attention_write_magnitude(rec, lm, layer) + norm


def additions_tolerance(*results) -> np.ndarray:
    """How far float32 additions may be from their exact sums: half an ulp of each float32 result (round to
    nearest; a tie rounds by exactly that), added up elementwise, and 4 u64 of each for the float64 arithmetic
    that checks them. E.g. a block's h + attn, then + mlp: additions_tolerance(h + attn, h_next)."""
    total = 0.0
    for r in results:
        r = np.abs(np.asarray(_numpy(r), dtype=np.float32))
        total = total + 0.5 * np.spacing(r).astype(np.float64) + 4 * U64 * r.astype(np.float64)
    return total


def attention_weights_tolerance(p, q, k, scale: float, input_error: float = 0.0) -> np.ndarray:
    """Per weight, tighter than attention_tolerance where scores are large (Gemma's normed q and k): the reference
    weights p (H, Tq, Tk), q (H, Tq, Dh), k (Hkv, Tk, Dh). A score's error d_ij <= (its Dh terms' rounding + 2
    input_error) |q_i| |k_j| scale moves weight ij by at most p_ij expm1(d_ij + sum_k p_ik d_ik), and the softmax's
    own sum of Tk terms rounds it once more (relative)."""
    p = np.asarray(_numpy(p), dtype=np.float64)
    qn = np.linalg.norm(np.asarray(_numpy(q), dtype=np.float64), axis=-1)  # (H, Tq)
    kn = np.linalg.norm(np.asarray(_numpy(k), dtype=np.float64), axis=-1)  # (Hkv, Tk)
    kn = np.repeat(kn, qn.shape[0] // kn.shape[0], axis=0)  # each query head's key/value head
    per_score = float32_tolerance(np.shape(q)[-1], 1.0) + 2 * input_error
    d = per_score * scale * qn[..., :, None] * kn[..., None, :]  # (H, Tq, Tk)
    spread = (p * d).sum(-1, keepdims=True)
    return p * np.expm1(d + spread) + float32_tolerance(p.shape[-1], 1.0, depth=2) * p


def float16_storage_tolerance(x) -> np.ndarray:
    """How far storing float32 values x in float16 moves them: 2^-11 of each (U16), and at most 2^-25 (half
    float16's smallest step, its subnormals' spacing) for the values below float16's normal range."""
    return U16 * np.abs(np.asarray(_numpy(x), dtype=np.float64)) + 2.0 ** -25
