"""The prompt's captured prefill as a plain record (numpy arrays only, no torch), so a stored
run unpickles and draws before the model (and torch) has loaded. Computed by pipeline.model.prefill.

Shape letters: L layers, H query heads, Hkv key/value heads, T positions, D model width,
Dh head width, V vocabulary.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Past this many prompt tokens the full attention tensor (L, H, T, T) is not kept: at 512 tokens
# it is 30*9*512*512*4 B = 283 MB for SmolLM2. Longer prompts run with SDPA (no (H, T, T) matrix is
# built at all) and a page recomputes one layer at a time from the captured q and k.
FULL_ATTENTION_MAX_TOKENS = 512
PREFILL_CHUNK = 512  # tokens per forward pass for long prompts: the lock is released between chunks
TOP_K_PER_POSITION = 10  # candidates per position in the command line's --tensors JSON (prefill.top_per_position)


def prefill_passes(T: int) -> int:
    """Forward passes the prefill of a T-token prompt takes: 1 up to FULL_ATTENTION_MAX_TOKENS, else one per
    PREFILL_CHUNK tokens.  prefill_passes(300) -> 1;  prefill_passes(612) -> 2."""
    return 1 if T <= FULL_ATTENTION_MAX_TOKENS else -(-T // PREFILL_CHUNK)



@dataclass
class Prefill:
    """Everything the prompt's prefill produced (one pass, or several chunks joined along T).
    Field names = hook names (see capture.py)."""

    ids: list[int]  # (T,)
    embeddings: np.ndarray  # (T, D) rows of the embedding table
    hidden_states: np.ndarray  # (L+1, T, D) residual stream; [0] = embeddings, [i+1] = after block i
    attn_out: np.ndarray  # (L, T, D) attention's write to the residual stream
    mlp_out: np.ndarray  # (L, T, D) MLP's write to the residual stream
    q_rot: np.ndarray  # (L, H, T, Dh) queries after RoPE
    k_rot: np.ndarray  # (L, Hkv, T, Dh) keys after RoPE (exactly what the KV cache stores)
    v: np.ndarray  # (L, Hkv, T, Dh) values
    attention: np.ndarray | None  # (L, H, T, T), or None past FULL_ATTENTION_MAX_TOKENS
    final_norm: np.ndarray  # (T, D) last hidden state after the final RMSNorm
    last_logits: np.ndarray  # (V,) scores for the token after the prompt
    kv_bytes_per_layer: list[int]  # (L,) real bytes of the cache after prefill
    seconds: float

    @property
    def T(self) -> int:
        return len(self.ids)

    def tensors(self) -> dict[str, np.ndarray]:
        """The captured arrays by their JSON name."""
        named = {name: getattr(self, name) for name in ("embeddings", "hidden_states", "attn_out", "mlp_out",
                                                        "q_rot", "k_rot", "v", "final_norm", "last_logits")}
        if self.attention is not None:
            named["attention"] = self.attention
        return named

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.tensors().values())
