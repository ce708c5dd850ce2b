"""Stage: layers. What the blocks do to the residual stream, read from the captured prefill.

hidden_states (L+1, T, D): [0] = embeddings, [i+1] = [i] + attn_out[i] + mlp_out[i].
The last entry is BEFORE the final RMSNorm; the logit lens applies that norm and the LM head to
every entry, asking "if the model stopped here, what would it predict?".
"""
from __future__ import annotations

import numpy as np

from pipeline.core.checks import array
from pipeline.model.interface import LanguageModel

# The reductions below read POSITION_CHUNK positions at a time: a long prompt's (L+1, T, D) captures are
# float16, and one float32 copy of them at T = 4,000 is 31 x 4,000 x 576 x 4 B = 285 MB (the cosine
# needed three such arrays at once, the Layers page peaked over 1 GB). Per chunk: 18 MB.
POSITION_CHUNK = 256


def derived_bytes_bound(L: int, T: int, D: int, chunk: int = POSITION_CHUNK) -> int:
    """The most bytes one of these reductions allocates at a time for (L+1, T, D) captures: its (L+1, T)
    float32 result (plus the list of chunk results, as much again) and two float32 (L+1, chunk, D)
    arrays (a chunk's float32 copy and room for one temporary of its size; einsum makes none)."""
    return 2 * (L + 1) * T * 4 + 2 * (L + 1) * min(chunk, T) * D * 4


def _by_positions(fn, *arrays: np.ndarray, chunk: int = POSITION_CHUNK) -> np.ndarray:
    """fn applied to float32 slices of `chunk` positions (axis 1) of each array, results joined on axis 1."""
    T = arrays[0].shape[1]
    return np.concatenate([fn(*(_f32(a[:, s:s + chunk]) for a in arrays)) for s in range(0, T, chunk)], axis=1)


def _norm(x: np.ndarray) -> np.ndarray:
    """Length along the last axis, float32 in and out, one temporary the size of x."""
    return np.sqrt(np.einsum("...d,...d->...", x, x))


def norms(hidden_states: np.ndarray) -> np.ndarray:
    """(L+1, T, D) -> (L+1, T) length of each token's vector after each layer."""
    return _by_positions(_norm, array("hidden_states", hidden_states, ndim=3, dtype=None))


def consecutive_cosine(hidden_states: np.ndarray) -> np.ndarray:
    """(L+1, T, D) -> (L, T) cosine between a token's vector before and after block i."""
    def cosine(h: np.ndarray) -> np.ndarray:  # (L+1, chunk, D)
        a, b = h[:-1], h[1:]  # views
        return np.einsum("...d,...d->...", a, b) / np.maximum(_norm(a) * _norm(b), 1e-12)

    return _by_positions(cosine, array("hidden_states", hidden_states, ndim=3, dtype=None))


def contributions(attn_out: np.ndarray, mlp_out: np.ndarray) -> dict[str, np.ndarray]:
    """Length of what attention and the MLP each add, (L, T) each."""
    attn_out, mlp_out = array("attn_out", attn_out, ndim=3, dtype=None), array("mlp_out", mlp_out, ndim=3, dtype=None)
    return {"attention": _by_positions(_norm, attn_out), "mlp": _by_positions(_norm, mlp_out)}


def _f32(x: np.ndarray) -> np.ndarray:
    """Long prompts are captured in float16, where squaring values near 25,000 overflows."""
    return x.astype(np.float32, copy=False)


LENS_CHUNK_ROWS = 128  # rows per (rows x V) product: 128 x 49,152 x 4 B = 25 MB (512 rows held 200 MB with the softmax)


def lens_head(lm: LanguageModel):
    """The logit lens's reading, as a function of (n, D) float32 torch rows of the residual stream -> (n, V) logits
    as if each row were the last layer's output: the final RMSNorm (Gemma: times 1 + weight), the output head,
    and the model's logit soft-capping where it has one (cap * tanh(z / cap): the order of the tokens stays, their
    probabilities change). The model's weights used directly (plain tensor maths, no module call, so no capture
    hook can see it)."""
    import torch  # here, not at import: the Layers page draws a stored run before torch has loaded

    from pipeline.model.capture import final_norm_scale

    norm = lm.model.model.norm
    eps = float(getattr(norm, "variance_epsilon", getattr(lm.config, "rms_norm_eps", 1e-6)))
    w_norm = final_norm_scale(lm.model).detach().float().cpu()  # (D,) the weight; Gemma: 1 + weight
    w_head = lm.model.get_output_embeddings().weight.detach().float().cpu()  # (V, D)
    cap = getattr(lm.config, "final_logit_softcapping", None)

    def head(x):  # (n, D) -> (n, V)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w_norm  # RMSNorm
        logits = x @ w_head.T
        return logits if not cap else cap * torch.tanh(logits / cap)

    return head


def lens_chunks(lm: LanguageModel, hidden_states: np.ndarray, read, chunk_rows: int = LENS_CHUNK_ROWS) -> list:
    """The logit lens over every row of hidden_states (L+1, P, D), at most `chunk_rows` rows at a time: per chunk
    read(logits (n, V), log_z (n, 1), rows) with rows the chunk's slice of the (L+1) x P flattened rows; the list
    of what it returned. Never (L+1, P, V), and never a second (n, V) array for a softmax: a probability is
    exp(logit - log_z)."""
    import torch

    L1, P, D = hidden_states.shape
    head = lens_head(lm)
    flat = torch.from_numpy(np.ascontiguousarray(hidden_states.reshape(L1 * P, D), dtype=np.float32))
    out = []
    with torch.inference_mode():
        for start in range(0, flat.shape[0], chunk_rows):
            rows = slice(start, start + chunk_rows)
            logits = head(flat[rows])  # (n, V)
            out.append(read(logits, torch.logsumexp(logits, dim=-1, keepdim=True), rows))
    return out


def top_tokens(logits, log_z, k: int):
    """(n, V) logits and their (n, 1) log_z -> ((n, k) ids, (n, k) probabilities), best first: the softmax keeps the
    order, so the top logits are the top probabilities."""
    import torch

    top = logits.topk(k, dim=-1)
    return top.indices, torch.exp(top.values - log_z)


def logit_lens(lm: LanguageModel, hidden_states: np.ndarray, k: int = 1, chunk_rows: int = LENS_CHUNK_ROWS,
               start: int = 0, end: int | None = None):
    """Top-k token ids and probabilities for every layer and the positions start..end-1:
    ((L+1, P, k), (L+1, P, k)) with P = end - start (default: all T positions).

    Reads through `lens_head` over at most `chunk_rows` rows at a time (lens_chunks), keeping only the top k.
    Each row costs a (D x V) product, so a page asks only for the positions it shows: 16 positions
    are (L+1) x 16 = 496 rows; a whole 641-token prompt would be 19,871 rows (about 100 s on a CPU).
    """
    import torch

    hidden_states = hidden_states[:, start:end]  # (L+1, P, D)
    L1, P, _ = hidden_states.shape
    chunks = lens_chunks(lm, hidden_states, lambda logits, log_z, rows: top_tokens(logits, log_z, k), chunk_rows)
    if not chunks:
        return np.zeros((L1, P, k), dtype=np.int64), np.zeros((L1, P, k), dtype=np.float32)
    ids = torch.cat([i for i, _ in chunks]).numpy().reshape(L1, P, k)
    probs = torch.cat([p for _, p in chunks]).numpy().reshape(L1, P, k)
    return ids, probs
