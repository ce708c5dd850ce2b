"""Named forward hooks: record any internal tensor of the model by a stable name.

One vocabulary: a hook's name ends in the name of the `Prefill` field (and trace JSON key) it fills;
`blocks.{i}.X` is row i of the stacked field X. Names are pinned by a test.

  hook name                  field / JSON key          shape per forward call
  embeddings                 embeddings                (B, T, D)   token embedding rows
  rope.cos / rope.sin        (used to rotate q)        (B, T, Dh)  RoPE tables for the positions
  blocks.{i}.q               q_rot (after RoPE)        (B, T, H*Dh) query, before RoPE
  blocks.{i}.k               k_rot (read from the cache) (B, T, Hkv*Dh) key, before RoPE
  blocks.{i}.v               v     (read from the cache) (B, T, Hkv*Dh) value projection
  blocks.{i}.attention       attention                 (B, H, T, T) weights (eager kernel only)
  blocks.{i}.attn_out        attn_out                  (B, T, D)   attention's write to the residual stream
  blocks.{i}.mlp_out         mlp_out                   (B, T, D)   MLP's write to the residual stream
  blocks.{i}.hidden_states   hidden_states[i + 1]      (B, T, D)   residual stream after block i
  final_norm                 final_norm                (B, T, D)   final RMSNorm output
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from .interface import LanguageModel


@dataclass(frozen=True)
class HookPoint:
    module: torch.nn.Module
    pick: Callable  # module output -> the tensor to keep


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _second(out):
    return out[1] if isinstance(out, (tuple, list)) and len(out) > 1 else None


def _flat_heads(out):
    """(B, T, n, Dh) -> (B, T, n*Dh), the projection's layout."""
    return _first(out).flatten(-2)


def hook_points(model) -> dict[str, HookPoint]:
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

                def hook(_module, _inputs, output, name=name, pick=point.pick):
                    value = pick(output)
                    if value is not None:
                        records[name].append(value.detach().to("cpu", dtype=store_dtype or value.dtype))

                handles.append(point.module.register_forward_hook(hook))
            yield records
        finally:
            for h in handles:
                h.remove()
