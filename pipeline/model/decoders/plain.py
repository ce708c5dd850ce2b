"""Decode steps of a loaded Llama-architecture model run straight from its weights: the plain serving
path's inner loop, with none of Hugging Face's per-call machinery (no DynamicCache growing by
torch.cat each step, no mask building, no module calls or hooks, no output dataclasses).

A step reads every weight once, and on a CPU that read is most of its time. HF's step spends ~70 %
in the matmuls and the rest in Python and small ops (module calls, cache concatenation, masks); this
decoder drops that rest and also reads the weights on every core (`row_blocks`: a one-token matmul
runs on a single core in MKL). The arithmetic is HF's own, op for op (RMSNorm in float32, RoPE from
the model's own rotary embedding (pipeline.model.rope), SDPA with grouped-query heads, unfused projections): on SmolLM2
each step's logits equal HF's decode step to the bit here, and greedy tokens equal
`model.generate(do_sample=False)` (tests/pipeline/model/test_plain_decoder.py).

    dec = open_decoder(lm, max_positions=len(ids) + 64)
    logits = dec.prefill(ids)              # (V,) after the prompt; the prompt runs through lm.forward_chunked
    logits = dec.step(int(logits.argmax()))  # (V,) after one more token: one forward pass

Shape letters: L layers, H query heads, Hkv key/value heads, Dh head width, D model width,
V vocabulary, T positions, B batch (always 1 here), F the MLP's hidden width.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from pipeline.model.interface import LanguageModel
from pipeline.model.kv_tensors import cache_layers
from pipeline.model.past import NOTHING, Past
from pipeline.model.rope import model_tables, rotate
from pipeline.model.weight_formats import Int8Rows, aten_bf16_gemv, is_int8

STATIC_ROPE_TYPES = ("default", "linear", "llama3")  # cos/sin depend on the position alone, not on T


class HFDecoder:
    """The fallback for models PlainDecoder does not cover: every step is a full HF forward pass."""

    def __init__(self, lm: LanguageModel):
        self.lm, self.kv_cache = lm, None  # the KV cache grows as HF's DynamicCache does: no size needed

    def prefill(self, ids: list[int], past: Past = NOTHING, kept: Callable[[object], None] | None = None
                ) -> torch.Tensor:
        """As PrefilledDecoder.prefill."""
        logits, self.kv_cache = self.lm.forward_chunked(ids[past.n:], past.cache)
        if kept is not None:
            kept(self.kv_cache)
        return logits  # (V,)

    def step(self, token: int) -> torch.Tensor:
        return self.lm.forward([[token]], cache=self.kv_cache).logits[0, -1]  # (V,)


def row_blocks(weight: torch.Tensor, k: int) -> torch.Tensor:
    """A Linear's weight (N, D) as k blocks of its rows, transposed for bmm: (k, D, N/k), a view
    (one block if N does not divide by k).

    One GEMV (a single token through a Linear) runs on one core in MKL, so a decode step reads its
    weights at one core's memory bandwidth. `project` hands the k blocks to bmm, which runs them on
    k threads; each output is still the same dot product as in F.linear: the same bits at SmolLM2's
    shapes (tested). Tiny blocks (under ~400 multiply-adds) take bmm's own loop and may differ in
    the last bit. An int8 weight (weight_formats) comes back as its Int8Rows: one fused kernel already
    runs it on every core.
    """
    if is_int8(weight):
        return Int8Rows.of(weight)
    N, D = weight.shape
    k = k if N % k == 0 else 1
    return weight.view(k, N // k, D).transpose(1, 2)


def project(x: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """F.linear(x, weight) for n tokens: x (n, D), blocks (k, D, N/k) from row_blocks -> (n, N).

        project(x, row_blocks(w, 2))  # == F.linear(x, w): rows [0, N/2) then [N/2, N)
    """
    if isinstance(blocks, Int8Rows):
        return blocks.project(x)
    if blocks.shape[0] == 1:
        return F.linear(x, blocks[0].t())  # one block: the Linear itself (always so on a GPU)
    out = torch.bmm(x.expand(blocks.shape[0], *x.shape), blocks)  # (k, n, N/k)
    return out.transpose(0, 1).reshape(x.shape[0], -1)


@dataclass
class _Layer:
    """One decoder block's weights: views of the model's own tensors, nothing copied."""

    norm1: torch.Tensor  # (D,) input_layernorm
    q: torch.Tensor  # (k, D, H*Dh/k) row blocks of q_proj (see row_blocks)
    k: torch.Tensor  # (k, D, Hkv*Dh/k)
    v: torch.Tensor  # (k, D, Hkv*Dh/k)
    o: torch.Tensor  # (k, H*Dh, D/k)
    norm2: torch.Tensor  # (D,) post_attention_layernorm
    gate: torch.Tensor  # (k, D, F/k)
    up: torch.Tensor  # (k, D, F/k)
    down: torch.Tensor  # (k, F, D/k)

    @classmethod
    def of(cls, block, k: int) -> "_Layer":
        a, m = block.self_attn, block.mlp
        b = lambda linear: row_blocks(linear.weight, k)  # noqa: E731
        return cls(block.input_layernorm.weight, b(a.q_proj), b(a.k_proj), b(a.v_proj), b(a.o_proj),
                   block.post_attention_layernorm.weight, b(m.gate_proj), b(m.up_proj), b(m.down_proj))


def blocks_for(device) -> int:
    """Row blocks per weight: one per CPU thread; on a GPU 1 (one GEMV already fills the device)."""
    return torch.get_num_threads() if torch.device(device).type == "cpu" else 1


def supports(model) -> bool:
    """Whether PlainDecoder computes exactly what this HF model does: a Llama without biases, SiLU MLP,
    a position-only RoPE, every weight on one device."""
    c = model.config
    rope = (getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}).get("rope_type", "default")
    return (getattr(c, "model_type", None) == "llama" and not getattr(c, "attention_bias", False)
            and not getattr(c, "mlp_bias", False) and getattr(c, "hidden_act", None) == "silu"
            and rope in STATIC_ROPE_TYPES and len({p.device for p in model.parameters()}) == 1)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's LlamaRMSNorm, op for op: x / sqrt(mean(x^2) + eps) in float32, times the weight."""
    x32 = x.to(torch.float32)
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def fill_from_prefill(keys: torch.Tensor, values: torch.Tensor, kv_cache, T: int) -> int:
    """Copy a prefill's HF cache into a decoder's preallocated keys/values (L, 1, Hkv, T_max, Dh). Each layer of
    the HF cache holds the last n <= T positions (n = T, or a sliding layer's window less one); they go to
    positions T - n ... T - 1. Returns T, the positions now filled."""
    with torch.inference_mode():
        for i, (k, v) in enumerate(cache_layers(kv_cache)):  # each (1, Hkv, n, Dh)
            n = k.shape[2]
            keys[i, :, :, T - n:T] = k
            values[i, :, :, T - n:T] = v
    return T


def next_position(keys: torch.Tensor, t: int, n: int = 1) -> int:
    """Position t, the next token's, checked to fit n tokens into a preallocated cache (L, 1, Hkv, T_max, Dh)."""
    if t + n > keys.shape[3]:
        raise ValueError(f"the decoder holds {keys.shape[3]} positions; position {t + n - 1} does not fit")
    return t


def causal_mask(t: int, n: int, start: int, window: int | None, device) -> torch.Tensor | None:
    """(n, t + n - start) bool: which cached positions start ... t+n-1 each of n new tokens (at t ... t+n-1) sees:
    itself and those before it, and for a sliding layer only its last `window`. None for one token (it sees
    every position it is given)."""
    if n == 1:
        return None
    query = torch.arange(t, t + n, device=device)[:, None]  # (n, 1)
    key = torch.arange(start, t + n, device=device)[None, :]  # (1, T')
    seen = key <= query
    return seen if window is None else seen & (key > query - window)


def rollback(decoder, T: int) -> None:
    """Forget a plain decoder's positions T and later (drafts it verified and rejected): the next token goes to
    position T. Nothing is erased: attention reads only the positions before T, and later writes overwrite."""
    if not 0 < T <= decoder.T:
        raise ValueError(f"can roll back to a position from 1 to {decoder.T}, not {T}")
    decoder.T = T


class PrefilledDecoder:
    """What the plain decoders share: the prompt runs through HF and its K/V are copied into the decoder's own
    cache (`keys`, `values`: (L, 1, Hkv, T_max, Dh), `T` positions filled); a step is `run` of one token."""
    lm: LanguageModel
    keys: torch.Tensor
    values: torch.Tensor
    T: int

    def prefill(self, ids: list[int], past: Past = NOTHING, kept: Callable[[object], None] | None = None
                ) -> torch.Tensor:
        """The prompt through HF (chunked, as the captured path runs it), its K/V copied into this cache (a
        sliding layer's HF cache holds only its last positions, all that attention reads of it). Returns
        logits (V,) for the token after the prompt. past: its first past.n positions computed before (their K/V
        in past.cache): only the rest runs. kept: called with the prompt's HF cache (to keep its blocks)."""
        logits, kv_cache = self.lm.forward_chunked(ids[past.n:], past.cache)
        if kept is not None:
            kept(kv_cache)
        self.T = fill_from_prefill(self.keys, self.values, kv_cache, len(ids))
        return logits

    def step(self, token: int) -> torch.Tensor:
        """One more token through every block at position T. Returns logits (V,) for the next one."""
        return self.run([token])[0]

    def run(self, tokens: list[int]) -> torch.Tensor:
        raise NotImplementedError


class PlainDecoder(PrefilledDecoder):
    """One request's decode: a preallocated K/V cache and the model's weights, stepped one token at a time.

    The cache holds max_positions positions, (L, B=1, Hkv, T_max, Dh) for keys and for values, written
    in place at each new position; attention reads the filled slice [:T].
    """

    def __init__(self, lm: LanguageModel, max_positions: int):
        self.lm = lm
        model = lm.model
        inner, c = model.model, model.config
        self.embed = inner.embed_tokens.weight  # (V, D)
        k = blocks_for(self.embed.device)
        self.layers = [_Layer.of(block, k) for block in inner.layers[:c.num_hidden_layers]]
        self.final_norm = inner.norm.weight  # (D,)
        self.head = row_blocks(model.get_output_embeddings().weight, k)  # (k, D, V/k)
        self.eps = c.rms_norm_eps
        self.H, self.Hkv = c.num_attention_heads, c.num_key_value_heads
        self.Dh = getattr(c, "head_dim", None) or c.hidden_size // self.H
        self.scale = self.Dh ** -0.5
        device, dtype = self.embed.device, self.embed.dtype
        shape = (len(self.layers), 1, self.Hkv, max_positions, self.Dh)
        self.keys = torch.empty(shape, device=device, dtype=dtype)  # (L, 1, Hkv, T_max, Dh) after RoPE
        self.values = torch.empty(shape, device=device, dtype=dtype)  # (L, 1, Hkv, T_max, Dh)
        self.cos, self.sin_signed = model_tables(inner.rotary_emb, max_positions, device, dtype)  # (T_max, Dh)
        self.T = 0  # positions filled

    def run(self, tokens: list[int]) -> torch.Tensor:
        """n tokens through every block at positions T ... T+n-1, in one pass (each sees those before it): one
        decode step for n = 1, a speculative verify pass for more. Returns logits (n, V): row j scores the
        token after tokens[j]."""
        n = len(tokens)
        t = next_position(self.keys, self.T, n)
        with self.lm.lock, torch.inference_mode(), aten_bf16_gemv(self.embed, n):  # bf16: see weight_formats
            h = self.embed[tokens]  # (n, D)
            cos, sin = self.cos[t:t + n], self.sin_signed[t:t + n]  # (n, Dh)
            for i, w in enumerate(self.layers):
                h = h + self._attention(i, w, rms_norm(h, w.norm1, self.eps), cos, sin, t)
                x = rms_norm(h, w.norm2, self.eps)
                h = h + project(F.silu(project(x, w.gate)) * project(x, w.up), w.down)  # (n, D)
            logits = project(rms_norm(h, self.final_norm, self.eps), self.head)  # (n, V)
            self.lm.count_pass()
        self.T = t + n
        return logits.float()  # (n, V) float32 already, but for bf16 weights

    def _attention(self, i: int, w: _Layer, x: torch.Tensor, cos, sin, t: int) -> torch.Tensor:
        """x (n, D) normed, at positions t ... t+n-1 -> the attention block's write to the residual stream (n, D)."""
        n = x.shape[0]
        q = rotate(project(x, w.q).view(n, self.H, self.Dh).transpose(0, 1), cos, sin)  # (H, n, Dh)
        self.keys[i, 0, :, t:t + n] = rotate(project(x, w.k).view(n, self.Hkv, self.Dh).transpose(0, 1), cos, sin)
        self.values[i, 0, :, t:t + n] = project(x, w.v).view(n, self.Hkv, self.Dh).transpose(0, 1)  # (Hkv, n, Dh)
        out = F.scaled_dot_product_attention(q[None], self.keys[i, :, :, :t + n], self.values[i, :, :, :t + n],
                                             attn_mask=causal_mask(t, n, 0, None, x.device), scale=self.scale,
                                             enable_gqa=True)  # (1, H, n, Dh); keys/values (1, Hkv, t+n, Dh)
        return project(out[0].transpose(0, 1).reshape(n, self.H * self.Dh), w.o)  # (n, D)
