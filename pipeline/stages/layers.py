"""Stage: layers. What the blocks do to the residual stream, read from the captured prefill.

hidden_states (L+1, T, D): [0] = embeddings, [i+1] = [i] + attn_out[i] + mlp_out[i].
The last entry is BEFORE the final RMSNorm; the logit lens applies that norm and the LM head to
every entry, asking "if the model stopped here, what would it predict?".
"""
from __future__ import annotations

import numpy as np
import torch

from ..checks import array


def norms(hidden_states: np.ndarray) -> np.ndarray:
    """(L+1, T, D) -> (L+1, T) length of each token's vector after each layer."""
    return np.linalg.norm(_f32(array("hidden_states", hidden_states, ndim=3, dtype=None)), axis=-1)


def consecutive_cosine(hidden_states: np.ndarray) -> np.ndarray:
    """(L+1, T, D) -> (L, T) cosine between a token's vector before and after block i."""
    hidden_states = array("hidden_states", hidden_states, ndim=3, dtype=None)
    a, b = _f32(hidden_states[:-1]), _f32(hidden_states[1:])  # (L, T, D) each
    num = (a * b).sum(-1)
    den = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    return num / np.maximum(den, 1e-12)


def contributions(attn_out: np.ndarray, mlp_out: np.ndarray) -> dict[str, np.ndarray]:
    """Length of what attention and the MLP each add, (L, T) each."""
    attn_out, mlp_out = (array(name, x, ndim=3, dtype=None) for name, x in (("attn_out", attn_out), ("mlp_out", mlp_out)))
    return {"attention": np.linalg.norm(_f32(attn_out), axis=-1), "mlp": np.linalg.norm(_f32(mlp_out), axis=-1)}


def _f32(x: np.ndarray) -> np.ndarray:
    """Long prompts are captured in float16, where squaring values near 25,000 overflows."""
    return x.astype(np.float32, copy=False)


def logit_lens(lm, hidden_states: np.ndarray, k: int = 1, chunk_rows: int = 512, start: int = 0,
               end: int | None = None):
    """Top-k token ids and probabilities for every layer and the positions start..end-1:
    ((L+1, P, k), (L+1, P, k)) with P = end - start (default: all T positions).

    Uses the model's final-norm and LM-head weights directly (plain tensor maths, no module call,
    so no capture hook can see it), over at most `chunk_rows` rows at a time: never (L+1, T, V).
    Each row costs a (D x V) product, so a page asks only for the positions it shows: 16 positions
    are (L+1) x 16 = 496 rows; a whole 641-token prompt would be 19,871 rows (about 100 s on a CPU).
    """
    hidden_states = hidden_states[:, start:end]  # (L+1, P, D)
    norm = lm.model.model.norm
    eps = float(getattr(norm, "variance_epsilon", getattr(lm.config, "rms_norm_eps", 1e-6)))
    w_norm = norm.weight.detach().float().cpu()  # (D,)
    w_head = lm.model.get_output_embeddings().weight.detach().float().cpu()  # (V, D)
    L1, T, D = hidden_states.shape
    flat = torch.from_numpy(np.ascontiguousarray(hidden_states.reshape(L1 * T, D), dtype=np.float32))
    ids, probs = [], []
    with torch.inference_mode():
        for start in range(0, flat.shape[0], chunk_rows):
            x = flat[start:start + chunk_rows]  # (n, D)
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w_norm  # RMSNorm
            logits = x @ w_head.T  # (n, V)
            p = torch.softmax(logits, dim=-1)
            top = p.topk(k, dim=-1)
            ids.append(top.indices)
            probs.append(top.values)
    ids = torch.cat(ids).numpy().reshape(L1, T, k)
    probs = torch.cat(probs).numpy().reshape(L1, T, k)
    return ids, probs
