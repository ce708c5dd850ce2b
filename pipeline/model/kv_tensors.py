"""Reading an HF KV cache object: its per-layer tensors, length and real bytes.

Cache internals change between transformers versions; this is the only module that touches them.
"""
from __future__ import annotations

import torch

from pipeline.model.dims import held_positions  # noqa: F401 (it lives with the dims: pages use it without torch)


def cache_layers(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) per layer, each (B, Hkv, T, Dh), across transformers cache versions."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))


def bytes_per_layer(cache) -> list[int]:
    """Bytes the cache really holds per layer, read from the stored tensors."""
    return [k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in cache_layers(cache)]


def cache_of(layers: list[tuple[torch.Tensor, torch.Tensor]], config):
    """A DynamicCache for `config` holding these keys and values per layer, each (1, Hkv, T, Dh) for positions
    0 .. T-1: what a prefill of those T positions leaves (a sliding-window layer keeps its last window - 1 of them, as
    HF's own layer does)."""
    from pipeline.model.hf_imports import transformers_names

    DynamicCache, = transformers_names("DynamicCache")
    cache = DynamicCache(config=config)
    for i, (k, v) in enumerate(layers):
        cache.update(k, v, i)
    return cache


def cache_len(cache) -> int:
    """Positions held (T)."""
    return int(cache.get_seq_length())


def crop(cache, length: int) -> None:
    """Keep the first `length` positions of every layer (the cache is changed in place)."""
    cache.crop(length)



def cache_with_room(shapes: list[tuple[int, int, int, int]], like: torch.Tensor, config, room: int,
                    spare_rows: int = 0):
    """An empty DynamicCache for `config` whose layer i holds keys and values of shapes[i] (B, Hkv, T, Dh), dtype
    and device of `like`, not yet written (the caller fills cache_layers(cache) in place), in buffers with `room`
    more positions and `spare_rows` more rows: each pass then writes its new positions in place, where HF's
    DynamicCache concatenates the whole cache anew at every step, and rows can be added or moved in place
    (place_rows). A layer whose buffer is full, or a sliding-window layer about to reach its window, goes on as
    HF's own layer does (torch.cat; the window then cut)."""
    from pipeline.model.hf_imports import transformers_names

    DynamicCache, = transformers_names("DynamicCache")
    cache = DynamicCache(config=config)
    for layer, (B, H, T, D) in zip(cache.layers, shapes, strict=True):
        layer.lazy_initialization(like, like)
        layer.room_keys, layer.room_values = (like.new_empty((B + spare_rows, H, T + room, D)) for _ in range(2))
        layer.keys, layer.values = layer.room_keys[:B, :, :T], layer.room_values[:B, :, :T]
        if layer.is_sliding:
            layer.cumulative_length = T
        layer.update = _write_in_place.__get__(layer)  # this layer's own update from here on
    return cache


def _write_in_place(layer, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
    T, n = layer.keys.shape[-2], key_states.shape[-2]
    if T + n > layer.room_keys.shape[-2] or (layer.is_sliding and T + n >= layer.sliding_window):
        del layer.update, layer.room_keys, layer.room_values  # HF's own update from here on
        return layer.update(key_states, value_states, *args, **kwargs)
    B = layer.keys.shape[0]
    layer.room_keys[:B, :, T:T + n], layer.room_values[:B, :, T:T + n] = key_states, value_states
    layer.keys, layer.values = layer.room_keys[:B, :, :T + n], layer.room_values[:B, :, :T + n]
    if layer.is_sliding:
        layer.cumulative_length += n
    return layer.keys, layer.values


def room_left(cache) -> tuple[int, int]:
    """(rows, positions) a cache_with_room cache can still take in place in every layer; (0, 0) for any other
    cache, or once one of its layers went on as HF's own."""
    rows, positions = [], []
    for layer in getattr(cache, "layers", [None]):
        if getattr(layer, "room_keys", None) is None:
            return 0, 0
        rows.append(layer.room_keys.shape[0] - layer.keys.shape[0])
        positions.append(layer.room_keys.shape[2] - layer.keys.shape[2])
    return min(rows), min(positions)


def place_rows(cache, moves: list[tuple[int, int]], rows: int) -> None:
    """In place, in a cache_with_room cache: copy row src to row dst for each (src, dst) of `moves` (each
    position copied once; only those rows), then hold `rows` rows (the first ones; rows past the ones held
    before are the buffer's spare rows, for the caller to write)."""
    for layer in cache.layers:
        T = layer.keys.shape[2]
        for src, dst in moves:
            layer.room_keys[dst, :, :T] = layer.room_keys[src, :, :T]
            layer.room_values[dst, :, :T] = layer.room_values[src, :, :T]
        layer.keys, layer.values = layer.room_keys[:rows, :, :T], layer.room_values[:rows, :, :T]
