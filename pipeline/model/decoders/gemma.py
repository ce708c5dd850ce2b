"""Decode steps of a loaded Gemma 3 model run straight from its weights: the plain serving path's inner
loop for Gemma, beside PlainDecoder (pipeline.model.decoders.plain) for Llama. The same idea (a
preallocated K/V cache written in place, no HF module calls, weights read on every core), with Gemma's
own block, op for op as HF's Gemma3 code writes it:

    h = embed[token] * sqrt(D)
    per block:  x = norm_in(h);  q, k = q_norm(q_proj x), k_norm(k_proj x), then RoPE of the layer's type
                h = h + norm_post_attn(o_proj(attention over the layer's positions))
                h = h + norm_post_mlp(down(gelu_tanh(gate x') * up x')),  x' = norm_pre_mlp(h)
    logits = head(norm(h))

Gemma's RMSNorm multiplies by (1 + weight) in float32. A sliding layer attends to its last `window`
positions (itself included); a full layer to all. Greedy tokens equal `model.generate(do_sample=False)`
(tests/pipeline/model/test_gemma_model.py).

Shape letters: L layers, H query heads, Hkv key/value heads, Dh head width, D model width, V vocabulary.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from pipeline.model.decoders.plain import PrefilledDecoder, blocks_for, causal_mask, next_position, project, row_blocks
from pipeline.model.dims import SLIDING
from pipeline.model.interface import LanguageModel
from pipeline.model.rope import model_tables, rotate
from pipeline.model.weight_formats import aten_bf16_gemv


def gemma_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's Gemma3RMSNorm, op for op: x / sqrt(mean(x^2) + eps) in float32, times (1 + weight)."""
    x32 = x.float()
    out = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return (out * (1.0 + weight.float())).type_as(x)


@dataclass
class _GemmaLayer:
    """One Gemma 3 block's weights: views of the model's own tensors, nothing copied."""

    norm_in: torch.Tensor  # (D,) input_layernorm
    q: torch.Tensor  # (k, D, H*Dh/k) row blocks of q_proj
    k: torch.Tensor
    v: torch.Tensor
    q_norm: torch.Tensor  # (Dh,)
    k_norm: torch.Tensor  # (Dh,)
    o: torch.Tensor
    norm_post_attn: torch.Tensor  # (D,) post_attention_layernorm
    norm_pre_mlp: torch.Tensor  # (D,) pre_feedforward_layernorm
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor
    norm_post_mlp: torch.Tensor  # (D,) post_feedforward_layernorm
    window: int | None  # positions a sliding layer attends to; None: all
    rope: str  # the layer type whose RoPE table it uses

    @classmethod
    def of(cls, block, k: int, layer_type: str, window: int) -> "_GemmaLayer":
        a, m = block.self_attn, block.mlp
        b = lambda linear: row_blocks(linear.weight, k)  # noqa: E731
        return cls(block.input_layernorm.weight, b(a.q_proj), b(a.k_proj), b(a.v_proj), a.q_norm.weight,
                   a.k_norm.weight, b(a.o_proj), block.post_attention_layernorm.weight,
                   block.pre_feedforward_layernorm.weight, b(m.gate_proj), b(m.up_proj), b(m.down_proj),
                   block.post_feedforward_layernorm.weight, window if layer_type == SLIDING else None, layer_type)


def supports_gemma(model) -> bool:
    """Whether GemmaPlainDecoder computes exactly what this HF model does: Gemma 3 text, no soft-capping,
    no biases, position-only RoPE, causal, every weight on one device."""
    c = model.config
    rope = getattr(c, "rope_parameters", None) or {}
    return (getattr(c, "model_type", None) == "gemma3_text" and not getattr(c, "attention_bias", False)
            and getattr(c, "attn_logit_softcapping", None) is None
            and getattr(c, "final_logit_softcapping", None) is None
            and not getattr(c, "use_bidirectional_attention", False)
            and all(isinstance(v, dict) and v.get("rope_type", "default") == "default" for v in rope.values())
            and len({p.device for p in model.parameters()}) == 1)


class GemmaPlainDecoder(PrefilledDecoder):
    """One request's decode on Gemma 3: a preallocated K/V cache (L, 1, Hkv, T_max, Dh), written in place;
    a sliding layer reads only its last `window` positions of it."""

    def __init__(self, lm: LanguageModel, max_positions: int):
        self.lm = lm
        model = lm.model
        inner, c = model.model, model.config
        self.embed = inner.embed_tokens.weight  # (V, D)
        self.embed_scale = inner.embed_tokens.embed_scale.to(self.embed.dtype)  # sqrt(D), as HF rounds it
        k = blocks_for(self.embed.device)
        self.layers = [_GemmaLayer.of(block, k, c.layer_types[i], c.sliding_window)
                       for i, block in enumerate(inner.layers[:c.num_hidden_layers])]
        self.final_norm = inner.norm.weight
        self.head = row_blocks(model.get_output_embeddings().weight, k)  # (k, D, V/k)
        self.act = inner.layers[0].mlp.act_fn  # gelu (tanh) as the model's own module computes it
        self.eps = c.rms_norm_eps
        self.H, self.Hkv, self.Dh = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.scale = c.query_pre_attn_scalar ** -0.5
        device, dtype = self.embed.device, self.embed.dtype
        shape = (len(self.layers), 1, self.Hkv, max_positions, self.Dh)
        self.keys = torch.empty(shape, device=device, dtype=dtype)  # after QK-norm and RoPE
        self.values = torch.empty(shape, device=device, dtype=dtype)
        self.tables = {}  # layer type -> (cos, signed sin) (T_max, Dh), from the model's own rotary embedding
        for layer_type in sorted(set(c.layer_types)):
            rotary = _TypedRotary(inner.rotary_emb, layer_type)
            self.tables[layer_type] = model_tables(rotary, max_positions, device, dtype)
        self.T = 0

    def run(self, tokens: list[int]) -> torch.Tensor:
        """n tokens through every block at positions T ... T+n-1 in one pass (as PlainDecoder.run). Returns
        logits (n, V)."""
        n = len(tokens)
        t = next_position(self.keys, self.T, n)
        with self.lm.lock, torch.inference_mode(), aten_bf16_gemv(self.embed, n):  # bf16: see weight_formats
            h = self.embed[tokens] * self.embed_scale  # (n, D)
            for i, w in enumerate(self.layers):
                x = gemma_rms_norm(h, w.norm_in, self.eps)
                h = h + gemma_rms_norm(self._attention(i, w, x, t), w.norm_post_attn, self.eps)
                x = gemma_rms_norm(h, w.norm_pre_mlp, self.eps)
                mlp = project(self.act(project(x, w.gate)) * project(x, w.up), w.down)  # (n, D)
                h = h + gemma_rms_norm(mlp, w.norm_post_mlp, self.eps)
            logits = project(gemma_rms_norm(h, self.final_norm, self.eps), self.head)  # (n, V)
            self.lm.count_pass()
        self.T = t + n
        return logits.float()  # (n, V) float32 already, but for bf16 weights

    def _attention(self, i: int, w: _GemmaLayer, x: torch.Tensor, t: int) -> torch.Tensor:
        """x (n, D) normed, at positions t ... t+n-1 -> o_proj of the attention over the layer's positions (n, D)."""
        n = x.shape[0]
        cos, sin = (table[t:t + n] for table in self.tables[w.rope])  # (n, Dh)
        q = gemma_rms_norm(project(x, w.q).view(n, self.H, self.Dh).transpose(0, 1), w.q_norm, self.eps)
        k = gemma_rms_norm(project(x, w.k).view(n, self.Hkv, self.Dh).transpose(0, 1), w.k_norm, self.eps)
        self.keys[i, 0, :, t:t + n] = rotate(k, cos, sin)  # (Hkv, n, Dh)
        self.values[i, 0, :, t:t + n] = project(x, w.v).view(n, self.Hkv, self.Dh).transpose(0, 1)
        start = 0 if w.window is None else max(0, t + 1 - w.window)  # the first position the first token sees
        out = F.scaled_dot_product_attention(rotate(q, cos, sin)[None], self.keys[i, :, :, start:t + n],
                                             self.values[i, :, :, start:t + n],
                                             attn_mask=causal_mask(t, n, start, w.window, x.device),
                                             scale=self.scale, enable_gqa=True)  # (1, H, n, Dh)
        return project(out[0].transpose(0, 1).reshape(n, self.H * self.Dh), w.o)  # (n, D)


class _TypedRotary:
    """Gemma's rotary embedding for one layer type, callable as a Llama one: (x, positions) -> (cos, sin)."""

    def __init__(self, rotary, layer_type: str):
        self.rotary, self.layer_type = rotary, layer_type

    def __call__(self, x, positions):
        return self.rotary(x, positions, self.layer_type)
