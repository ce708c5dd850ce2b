"""Named forward hooks: record any internal tensor of the model by a stable name.

Names follow one scheme (pinned by a test):
  embed                      token embedding rows            (B, T, D)
  rotary.cos / rotary.sin    RoPE tables for the positions   (B, T, Dh)
  blocks.{i}.attn.q          query, before RoPE              (B, T, H*Dh)
  blocks.{i}.attn.k          key, before RoPE                (B, T, Hkv*Dh)
  blocks.{i}.attn.v          value projection                (B, T, Hkv*Dh)
  blocks.{i}.attn.pattern    attention weights (eager only)  (B, H, T, T)
  blocks.{i}.attn.out        attention's write to the residual stream (B, T, D)
  blocks.{i}.mlp.out         MLP's write to the residual stream       (B, T, D)
  blocks.{i}.out             residual stream after block i            (B, T, D)
  final_norm                 final RMSNorm output                     (B, T, D)
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import torch


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
        "embed": HookPoint(body.embed_tokens, _first),
        "rotary.cos": HookPoint(body.rotary_emb, _first),
        "rotary.sin": HookPoint(body.rotary_emb, _second),
    }
    for i, block in enumerate(body.layers):
        attn = block.self_attn
        # Models with q/k norms (Qwen3) normalise after the projection and before RoPE: read there.
        q_src = HookPoint(attn.q_norm, _flat_heads) if hasattr(attn, "q_norm") else HookPoint(attn.q_proj, _first)
        k_src = HookPoint(attn.k_norm, _flat_heads) if hasattr(attn, "k_norm") else HookPoint(attn.k_proj, _first)
        points[f"blocks.{i}.attn.q"] = q_src
        points[f"blocks.{i}.attn.k"] = k_src
        points[f"blocks.{i}.attn.v"] = HookPoint(attn.v_proj, _first)
        points[f"blocks.{i}.attn.pattern"] = HookPoint(attn, _second)
        points[f"blocks.{i}.attn.out"] = HookPoint(attn, _first)
        points[f"blocks.{i}.mlp.out"] = HookPoint(block.mlp, _first)
        points[f"blocks.{i}.out"] = HookPoint(block, _first)
    points["final_norm"] = HookPoint(body.norm, _first)
    return points


@contextmanager
def capture(model, names: list[str], lock=None, store_dtype: torch.dtype | None = None
            ) -> Iterator[dict[str, list[torch.Tensor]]]:
    """Record the named tensors of every forward pass run inside the block.

    Yields {name: [tensor per forward call]}, moved to the CPU (and to `store_dtype` if given, to
    keep long prompts compact). Hooks are removed in `finally`, and `lock` (the model's lock) is
    held from registration to removal so no other caller sees them.
    """
    points = hook_points(model)
    unknown = [n for n in names if n not in points]
    if unknown:
        raise KeyError(f"unknown hook names: {unknown[:5]}")
    records: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    handles = []
    if lock is not None:
        lock.acquire()
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
        if lock is not None:
            lock.release()
