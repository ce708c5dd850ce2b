"""Named forward hooks: record any internal tensor of the model by a stable name.

One vocabulary: a hook's name ends in the name of the `Prefill` field (and trace JSON key) it fills;
`blocks.{i}.X` is row i of the stacked field X. Names are pinned by a test. Where each name is read
differs by architecture: one layout class per block shape (`LlamaLayout`, `Gemma3Layout`), picked
by `layout_for(model)`, which refuses an architecture it does not know, naming what is missing.

  hook name                  field / JSON key          shape per forward call
  embeddings                 embeddings                (B, T, D)   token embedding rows (Gemma: times sqrt(D))
  rope.cos / rope.sin        (used to rotate q and k)  (B, T, Dh)  RoPE tables for the positions (Llama)
  rope.{type}.cos / .sin     (the same, per layer type) (B, T, Dh) Gemma 3: one table per layer type
  blocks.{i}.q               q_rot (after RoPE)        (B, T, H*Dh) query, before RoPE (after QK-norm)
  blocks.{i}.k               k_rot (after RoPE)        (B, T, Hkv*Dh) key, before RoPE (after QK-norm)
  blocks.{i}.v               v                         (B, T, Hkv*Dh) value projection
  blocks.{i}.attention       attention                 (B, H, T, T) weights (eager kernel only)
  blocks.{i}.attn_out        attn_out                  (B, T, D)   attention's write to the residual stream
  blocks.{i}.mlp_out         mlp_out                   (B, T, D)   MLP's write to the residual stream
  blocks.{i}.hidden_states   hidden_states[i + 1]      (B, T, D)   residual stream after block i
  final_norm                 final_norm                (B, T, D)   final RMSNorm output

In Gemma 3 "the write to the residual stream" is after the block's extra norms (post_attention_layernorm,
post_feedforward_layernorm), so hidden_states[i + 1] = hidden_states[i] + attn_out + mlp_out in both.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from pipeline.core.errors import InputError
from pipeline.model.interface import LanguageModel


@dataclass(frozen=True)
class HookPoint:
    module: torch.nn.Module
    pick: Callable  # module output -> the tensor to keep
    when: Callable | None = None  # (args, kwargs) of the call -> whether this call is the one to keep


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _second(out):
    return out[1] if isinstance(out, (tuple, list)) and len(out) > 1 else None


def _flat_heads(out):
    """(B, T, n, Dh) -> (B, T, n*Dh), the projection's layout."""
    return _first(out).flatten(-2)


def _heads_first(out):
    """(B, n, T, Dh) -> (B, T, n*Dh): Gemma 3 norms q and k after moving the heads axis forward."""
    return _first(out).transpose(1, 2).flatten(-2)


def _missing(root, paths: list[str]) -> list[str]:
    """The dotted attribute paths under `root` that are not there."""
    out = []
    for path in paths:
        node = root
        for part in path.split("."):
            node = getattr(node, part, None)
            if node is None:
                out.append(path)
                break
    return out


class LlamaLayout:
    """Llama-shaped blocks (SmolLM2, Qwen2, Qwen3, Mistral): two norms per block; attention and MLP add their
    outputs straight to the residual stream; one RoPE table for every layer."""

    NEEDS = ["model.embed_tokens", "model.rotary_emb", "model.norm", "model.layers"]
    BLOCK_NEEDS = ["input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                   "self_attn.v_proj", "self_attn.o_proj", "mlp"]

    @staticmethod
    def rope_names(model) -> list[str]:
        """The hook names of the RoPE tables, cos then sin for each kind."""
        return ["rope.cos", "rope.sin"]

    @staticmethod
    def layer_rope(model, i: int) -> str:
        """The prefix of layer i's RoPE table names."""
        return "rope"

    @staticmethod
    def norm_scale(norm) -> torch.Tensor:
        """What an RMSNorm multiplies the normalised vector by: its weight."""
        return norm.weight

    @staticmethod
    def points(model) -> dict[str, HookPoint]:
        body = model.model
        points = {
            "embeddings": HookPoint(body.embed_tokens, _first),
            "rope.cos": HookPoint(body.rotary_emb, _first),
            "rope.sin": HookPoint(body.rotary_emb, _second),
        }
        for i, block in enumerate(body.layers):
            attn = block.self_attn
            # Models with q/k norms (Qwen3) normalise after the projection and before RoPE: read there.
            q_src = HookPoint(attn.q_norm, _flat_heads) if hasattr(attn, "q_norm") else HookPoint(attn.q_proj, _first)
            k_src = HookPoint(attn.k_norm, _flat_heads) if hasattr(attn, "k_norm") else HookPoint(attn.k_proj, _first)
            points[f"blocks.{i}.q"] = q_src
            points[f"blocks.{i}.k"] = k_src
            points[f"blocks.{i}.v"] = HookPoint(attn.v_proj, _first)
            points[f"blocks.{i}.attention"] = HookPoint(attn, _second)
            points[f"blocks.{i}.attn_out"] = HookPoint(attn, _first)
            points[f"blocks.{i}.mlp_out"] = HookPoint(block.mlp, _first)
            points[f"blocks.{i}.hidden_states"] = HookPoint(block, _first)
        points["final_norm"] = HookPoint(body.norm, _first)
        return points


def _layer_type_is(layer_type: str) -> Callable:
    """A `when` for Gemma 3's rotary embedding, called once per layer type: rotary_emb(x, positions, type)."""
    return lambda args, kwargs: (args[2] if len(args) > 2 else kwargs.get("layer_type")) == layer_type


class Gemma3Layout:
    """Gemma 3 blocks: QK-norm on every head before RoPE, four norms per block (the attention's and the
    MLP's outputs are normed again before they join the residual stream), embeddings scaled by sqrt(D)
    inside the embedding module, and one RoPE table per layer type (sliding or full)."""

    NEEDS = LlamaLayout.NEEDS
    BLOCK_NEEDS = ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                   "post_feedforward_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                   "self_attn.q_norm", "self_attn.k_norm", "mlp"]

    @staticmethod
    def norm_scale(norm) -> torch.Tensor:
        """Gemma's RMSNorm multiplies by (1 + weight)."""
        return 1.0 + norm.weight

    @staticmethod
    def rope_names(model) -> list[str]:
        return [f"rope.{t}.{part}" for t in sorted(set(model.config.layer_types)) for part in ("cos", "sin")]

    @staticmethod
    def layer_rope(model, i: int) -> str:
        return f"rope.{model.config.layer_types[i]}"

    @staticmethod
    def points(model) -> dict[str, HookPoint]:
        body = model.model
        points = {"embeddings": HookPoint(body.embed_tokens, _first)}
        for t in sorted(set(model.config.layer_types)):
            points[f"rope.{t}.cos"] = HookPoint(body.rotary_emb, _first, _layer_type_is(t))
            points[f"rope.{t}.sin"] = HookPoint(body.rotary_emb, _second, _layer_type_is(t))
        for i, block in enumerate(body.layers):
            attn = block.self_attn
            points[f"blocks.{i}.q"] = HookPoint(attn.q_norm, _heads_first)
            points[f"blocks.{i}.k"] = HookPoint(attn.k_norm, _heads_first)
            points[f"blocks.{i}.v"] = HookPoint(attn.v_proj, _first)
            points[f"blocks.{i}.attention"] = HookPoint(attn, _second)
            points[f"blocks.{i}.attn_out"] = HookPoint(block.post_attention_layernorm, _first)
            points[f"blocks.{i}.mlp_out"] = HookPoint(block.post_feedforward_layernorm, _first)
            points[f"blocks.{i}.hidden_states"] = HookPoint(block, _first)
        points["final_norm"] = HookPoint(body.norm, _first)
        return points


LAYOUTS = {"gemma3_text": Gemma3Layout}  # model_type -> its layout; any other must have Llama's block shape
# Block parts whose presence means a shape LlamaLayout would capture wrongly (extra norms around the MLP).
NOT_LLAMA = ["pre_feedforward_layernorm", "post_feedforward_layernorm"]


def layout_for(model):
    """The layout that knows `model`'s blocks, or an InputError naming what the capture is missing."""
    model_type = getattr(model.config, "model_type", "?")
    layout = LAYOUTS.get(model_type, LlamaLayout)
    missing = _missing(model, layout.NEEDS)
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not missing and layers is not None and len(layers):
        missing = [f"model.layers.0.{m}" for m in _missing(layers[0], layout.BLOCK_NEEDS)]
        extra = [] if layout is not LlamaLayout else [n for n in NOT_LLAMA if hasattr(layers[0], n)]
        if extra:
            raise InputError("model", f"the capture does not know the architecture {model_type!r}: its blocks have "
                                      f"{', '.join(extra)}, which the Llama-shaped capture would skip.")
    if layout is LlamaLayout and "rope_parameters" in vars(model.config) and any(
            isinstance(v, dict) for v in (model.config.rope_parameters or {}).values()):
        missing.append("one RoPE table for every layer (this model has one per layer type)")
    if missing:
        raise InputError("model", f"the capture does not know the architecture {model_type!r}: it needs "
                                  f"{', '.join(missing)}, not found in this model.")
    return layout


def final_norm_scale(model) -> torch.Tensor:
    """(D,) what the final RMSNorm multiplies by, for maths that applies it by hand (the logit lens)."""
    return layout_for(model).norm_scale(model.model.norm)


def hook_points(model) -> dict[str, HookPoint]:
    return layout_for(model).points(model)


def block_names(n_layers: int, field: str) -> list[str]:
    """['blocks.0.attn_out', 'blocks.1.attn_out', ...]: one hook per block for a stacked field."""
    return [f"blocks.{i}.{field}" for i in range(n_layers)]


@contextmanager
def capture(lm: LanguageModel, names: list[str],
            store_dtype: torch.dtype | None = None) -> Iterator[dict[str, list[torch.Tensor]]]:
    """Record the named tensors of every forward pass run inside the block.

    Yields {name: [tensor per forward call]}, moved to the CPU (and to `store_dtype` if given, to
    keep long prompts compact). The model's lock is held from registering the hooks to removing
    them (in `finally`), so no other caller's forward pass ever sees them.
    """
    points = hook_points(lm.model)
    unknown = [n for n in names if n not in points]
    if unknown:
        raise KeyError(f"unknown hook names: {unknown[:5]}")
    records: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    handles = []
    with lm.lock:
        try:
            for name in names:
                point = points[name]

                def hook(_module, args, kwargs, output, name=name, pick=point.pick, when=point.when):
                    if when is not None and not when(args, kwargs):
                        return
                    value = pick(output)
                    if value is not None:
                        records[name].append(value.detach().to("cpu", dtype=store_dtype or value.dtype))

                handles.append(point.module.register_forward_hook(hook, with_kwargs=True))
            yield records
        finally:
            for h in handles:
                h.remove()
