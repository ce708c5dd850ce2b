"""Reading an HF KV cache object: its per-layer tensors, length and real bytes.

Cache internals change between transformers versions; this is the only module that touches them.
"""
from __future__ import annotations

import torch

from .dims import held_positions  # noqa: F401 (it lives with the dims: pages use it without torch)


def cache_layers(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) per layer, each (B, Hkv, T, Dh), across transformers cache versions."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))


def bytes_per_layer(cache) -> list[int]:
    """Bytes the cache really holds per layer, read from the stored tensors."""
    return [k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in cache_layers(cache)]


def cache_len(cache) -> int:
    """Positions held (T)."""
    return int(cache.get_seq_length())


def crop(cache, length: int) -> None:
    """Keep the first `length` positions of every layer (the cache is changed in place)."""
    cache.crop(length)
