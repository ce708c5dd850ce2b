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


def logit_lens(lm: LanguageModel, hidden_states: np.ndarray, k: int = 1, chunk_rows: int = LENS_CHUNK_ROWS,
               start: int = 0, end: int | None = None):
    """Top-k token ids and probabilities for every layer and the positions start..end-1:
    ((L+1, P, k), (L+1, P, k)) with P = end - start (default: all T positions).

    Reads through `lens_head` over at most `chunk_rows` rows at a time: never (L+1, T, V), and
    only the top k probabilities (exp(logit - logsumexp)), never a second (rows, V) array for the softmax.
    Each row costs a (D x V) product, so a page asks only for the positions it shows: 16 positions
    are (L+1) x 16 = 496 rows; a whole 641-token prompt would be 19,871 rows (about 100 s on a CPU).
    """
    import torch

    hidden_states = hidden_states[:, start:end]  # (L+1, P, D)
    head = lens_head(lm)
    L1, T, D = hidden_states.shape
    flat = torch.from_numpy(np.ascontiguousarray(hidden_states.reshape(L1 * T, D), dtype=np.float32))
    ids, probs = [], []
    with torch.inference_mode():
        for start in range(0, flat.shape[0], chunk_rows):
            logits = head(flat[start:start + chunk_rows])  # (n, V)
            top = logits.topk(k, dim=-1)  # the softmax keeps the order: top logits = top probabilities
            ids.append(top.indices)
            probs.append(torch.exp(top.values - torch.logsumexp(logits, dim=-1, keepdim=True)))
    ids = torch.cat(ids).numpy().reshape(L1, T, k)
    probs = torch.cat(probs).numpy().reshape(L1, T, k)
    return ids, probs
