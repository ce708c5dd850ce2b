"""Direct logit attribution: how much each part of the residual stream adds to one token's logit.

The logit of token t is  W_U[t] . (x * r * g),  x the stream after the last block at the last position,
g the final norm's scale (Gemma: 1 + w), r = 1 / rms(x). Freeze r at the run's value and the logit is linear
in x; x is the embedding plus every layer's attention and MLP output, so

    logit = u . embedding + sum_i (u . attn[i] + u . mlp[i]),   u = W_U[t] * r * g      (exact)

and each head's share of attn[i] is u . (its slice of o_proj) (exact for their sum, attn[i]; in Gemma through
the post-attention norm, its scale frozen the same way). A part alone is read linearly: the real model
would rescale r if that part were gone (interventions.py measures that).
A difference "t minus t2" uses u = (W_U[t] - W_U[t2]) * r * g.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.attribution.record import StepRecord, weights
from pipeline.core.errors import InputError
from pipeline.model.interface import LanguageModel


@dataclass
class LogitAttribution:
    target_id: int
    minus_id: int | None  # the logit difference target - minus, or the target's logit alone
    logit: float  # the model's own logit (difference) at this step
    embedding: float
    attention: np.ndarray  # (L,)
    mlp: np.ndarray  # (L,)
    heads: np.ndarray  # (L, H)

    @property
    def total(self) -> float:
        """embedding + every layer's attention and MLP: equals `logit` up to float rounding."""
        return float(self.embedding + self.attention.sum() + self.mlp.sum())

    def to_json(self) -> dict:
        return {"target_id": self.target_id, "minus_id": self.minus_id, "logit": self.logit,
                "embedding": self.embedding, "sum_of_parts": self.total,
                "layers": [{"layer": i, "attention": float(a), "mlp": float(m)}
                           for i, (a, m) in enumerate(zip(self.attention, self.mlp))],
                "heads": self.heads.tolist()}


def check_token(name: str, token_id: int, V: int) -> int:
    if not (isinstance(token_id, (int, np.integer)) and 0 <= int(token_id) < V):
        raise InputError(name, f"must be a token id between 0 and {V - 1:,}, got {token_id!r}.")
    return int(token_id)


def frozen_norm(rec: StepRecord, lm: LanguageModel) -> np.ndarray:
    """(D,) r * g: the final norm at the last position, its scale frozen at the run's value."""
    _, g, eps, _, _ = weights(lm)
    x = rec.resid[-1, -1].astype(np.float64)
    r = 1.0 / np.sqrt(np.mean(x * x) + eps)
    return (r * g.numpy().astype(np.float64))


def head_outputs(rec: StepRecord, lm: LanguageModel, layer: int, position: int = -1) -> np.ndarray:
    """(H, D) each head's write to the residual stream at `position`: its slice of z through its slice of o_proj
    (Gemma: times the post-attention norm's frozen scale). They sum to attn[layer, position]."""
    _, _, _, w_o, post = weights(lm)
    H, Dh = lm.dims.H, lm.dims.Dh
    z = rec.z[layer, position].reshape(H, Dh).astype(np.float64)
    w = w_o[layer].numpy().astype(np.float64).reshape(-1, H, Dh)  # (D, H, Dh)
    out = np.einsum("dhk,hk->hd", w, z)
    if post is not None:
        out = out * rec.post_scale[layer, position] * post[layer].numpy()
    return out


def direct_logit_attribution(rec: StepRecord, lm: LanguageModel, target_id: int,
                             minus_id: int | None = None) -> LogitAttribution:
    """The logit of `target_id` (minus that of `minus_id`) at the record's last position, split into parts."""
    V = lm.dims.V
    target_id = check_token("target", target_id, V)
    minus_id = None if minus_id is None else check_token("minus", minus_id, V)
    w_u = weights(lm)[0]
    direction = w_u[target_id].numpy().astype(np.float64)
    logit = float(rec.logits[target_id])
    if minus_id is not None:
        direction = direction - w_u[minus_id].numpy()
        logit -= float(rec.logits[minus_id])
    u = direction * frozen_norm(rec, lm)  # (D,)
    heads = np.stack([head_outputs(rec, lm, i) @ u for i in range(lm.dims.L)])
    return LogitAttribution(target_id, minus_id, logit, float(rec.resid[0, -1] @ u),
                            rec.attn[:, -1].astype(np.float64) @ u, rec.mlp[:, -1].astype(np.float64) @ u, heads)


def promoted_tokens(rec: StepRecord, lm: LanguageModel, layer: int, head: int | None, k: int = 8) -> tuple[list, list]:
    """What one head's write (head None: the layer's MLP) does to every token's logit through the frozen final
    norm and the unembedding: ([(id, logit change)] most raised, [(id, change)] most lowered), k each."""
    vec = rec.mlp[layer, -1] if head is None else head_outputs(rec, lm, layer)[head]
    return promoted_by(rec, lm, vec, k)


def promoted_by(rec: StepRecord, lm: LanguageModel, vec: np.ndarray, k: int = 8) -> tuple[list, list]:
    """promoted_tokens for any (D,) vector written to the last position's stream (a token's embedding...)."""
    w_u = weights(lm)[0]
    scores = w_u.numpy() @ (vec * frozen_norm(rec, lm)).astype(np.float32)  # (V,)
    order = np.argsort(scores)
    return ([(int(i), float(scores[i])) for i in order[::-1][:k]], [(int(i), float(scores[i])) for i in order[:k]])
