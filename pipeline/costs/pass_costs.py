"""FLOPs and bytes of one forward pass, from the model's dimensions alone (no torch).

A pass feeds `T` new tokens to a model whose KV cache already holds `past` positions. Counted:

- FLOPs of the matrix multiplies, 2 per multiply-add, as `torch.utils.flop_counter` counts them:
  per layer q, k, v, o projections 2·T·D·(H + 2·Hkv + H)·Dh, the MLP's three matrices 2·T·3·D·D_mlp,
  attention's two products 2·2·T·K·H·Dh where K is the keys the pass reads (the T² term at prefill:
  K = past + T), and the LM head 2·logits·D·V. A dense kernel computes every query-key pair, the ones a
  causal or sliding-window mask then hides too, so K is all the keys it is given.
- Bytes moved to and from memory: every weight read once (the blocks, the final norm, the LM head's V·D
  matrix), the T embedding rows looked up, the KV cache read (K = keys held before the pass) and the T new
  positions written. With tied embeddings (both models here) the head's matrix is the embedding table:
  one V·D matrix in memory, read once per pass by the head. Activations are left out (small next to the
  weights at decode; at prefill they mostly stay in cache).

Worked example, SmolLM2-135M (L=30, D=576, H=9, Hkv=3, Dh=64, D_mlp=1536, V=49,152, float32), one decode
step at past=99: 134,515,008 weights (538 MB) read for 276 M FLOPs: 0.51 FLOPs per byte.
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.checks import integer
from pipeline.model.dims import ModelDims, held_positions


@dataclass(frozen=True)
class PassCost:
    T: int  # new tokens fed in this pass
    past: int  # positions before the pass
    flops_linear: int  # projections and MLP, all layers
    flops_attention: int  # q·k and attention·v, all layers
    flops_head: int  # the LM head
    bytes_weights: int  # every weight read once, and the T embedding rows
    bytes_kv_read: int
    bytes_kv_written: int

    @property
    def flops(self) -> int:
        return self.flops_linear + self.flops_attention + self.flops_head

    @property
    def bytes(self) -> int:
        return self.bytes_weights + self.bytes_kv_read + self.bytes_kv_written

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved: high at prefill (compute-bound), about 0.5 per byte of float32 weights at decode."""
        return self.flops / self.bytes if self.bytes else 0.0

    def to_json(self) -> dict:
        return {"new_tokens": self.T, "past": self.past, "flops": self.flops, "bytes": self.bytes,
                "flops_linear": self.flops_linear, "flops_attention": self.flops_attention,
                "flops_head": self.flops_head, "bytes_weights": self.bytes_weights,
                "bytes_kv_read": self.bytes_kv_read, "bytes_kv_written": self.bytes_kv_written}


def norms_per_block(m: ModelDims) -> int:
    """RMSNorm weight vectors of width D per block: 2 (Llama), 4 (Gemma 3: attention and MLP outputs normed again)."""
    return 4 if m.architecture.startswith("gemma") else 2


def block_weights(m: ModelDims) -> int:
    """Values in one block: the four attention matrices, the MLP's three, its norms (and Gemma's QK-norms)."""
    attention = m.D * (2 * m.H + 2 * m.Hkv) * m.Dh
    mlp = 3 * m.D * (m.D_mlp or 4 * m.D)
    return attention + mlp + norms_per_block(m) * m.D + (2 * m.Dh if m.qk_norm else 0)


def keys_read(m: ModelDims, layer: int, T: int, past: int) -> int:
    """Keys the pass's attention multiplies against in this layer: those held before it, plus its own T."""
    return held_positions(m.window(layer), past) + T


def pass_cost(m: ModelDims, T: int, past: int = 0, logits: int = 1) -> PassCost:
    """One pass of T new tokens after `past` positions; `logits`: positions the LM head is computed for
    (1: only the last, as a run's prefill and every decode step do)."""
    integer("T", T, 1, 10**7)
    integer("past", past, 0, 10**7)
    integer("logits", logits, 0, T)
    D_mlp = m.D_mlp or 4 * m.D
    b = m.bytes_per_value
    per_layer_linear = 2 * T * (m.D * (2 * m.H + 2 * m.Hkv) * m.Dh + 3 * m.D * D_mlp)
    keys = [keys_read(m, i, T, past) for i in range(m.L)]
    attention = sum(2 * 2 * T * k * m.H * m.Dh for k in keys)
    held = sum(held_positions(m.window(i), past) for i in range(m.L))
    return PassCost(
        T=T, past=past,
        flops_linear=m.L * per_layer_linear,
        flops_attention=attention,
        flops_head=2 * logits * m.D * m.V,
        bytes_weights=(m.L * block_weights(m) + m.D + m.V * m.D + T * m.D) * b,
        bytes_kv_read=2 * m.Hkv * m.Dh * held * b,
        bytes_kv_written=2 * m.Hkv * m.Dh * T * m.L * b,
    )


def prefill_cost(m: ModelDims, n_prompt: int) -> PassCost:
    return pass_cost(m, n_prompt, 0)


def decode_cost(m: ModelDims, past: int, batch_size: int = 1) -> PassCost:
    """One decode step: one new token per request, `batch_size` requests each after `past` positions.
    The weights are read once for the whole batch (the article's "one read, dozens of tokens"); FLOPs
    and KV traffic grow with the batch."""
    one = pass_cost(m, 1, past)
    B = integer("batch_size", batch_size, 1, 10**5)
    return PassCost(T=B, past=past, flops_linear=B * one.flops_linear, flops_attention=B * one.flops_attention,
                    flops_head=B * one.flops_head,
                    bytes_weights=one.bytes_weights + (B - 1) * m.D * m.bytes_per_value,
                    bytes_kv_read=B * one.bytes_kv_read, bytes_kv_written=B * one.bytes_kv_written)
