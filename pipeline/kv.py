"""KV cache accounting: real bytes held by the cache, and the formula that predicts them."""
from __future__ import annotations

import torch


def cache_layers(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) per layer, each (B, Hkv, T, Dh), across transformers cache versions."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))


def bytes_per_layer(cache) -> list[int]:
    """Bytes the cache really holds per layer, read from the stored tensors."""
    return [k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in cache_layers(cache)]


def kv_bytes_formula(layers: int, kv_heads: int, head_dim: int, tokens: int, bytes_per_value: int) -> int:
    """2 (K and V) * L * Hkv * Dh * tokens * bytes. Qwen3-8B, 16-bit: 2*36*8*128*2 = 147,456 B/token."""
    return 2 * layers * kv_heads * head_dim * tokens * bytes_per_value
