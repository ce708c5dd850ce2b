"""Prompt caching in the server: every request the queue serves (captured runs and live streams, pages, the room
and the API alike) goes through one PrefixCache per model, so reuse is real, not simulated.

The algorithm, per request:
1. take: the longest run of cached blocks the prompt starts with (chained block hashes; at least one token left to
   run). A captured run (every layer's tensors at every position) takes only blocks that kept a captured run's
   tensors, with their attention rows when it keeps attention; a plain run takes any block.
2. the prefill runs the model on the rest only, over those blocks' K/V (positions continue from the reused length,
   so RoPE is as in a full run); a captured run's reused positions show the captures kept with the blocks.
3. keep: its full blocks not cached yet (with its captures, from a captured run), then LRU eviction within the
   byte budget (K/V and captures counted); blocks idle past the TTL expire.
Its record says `reused_positions`: the positions whose K/V it really reused (0 on a miss).

A model with sliding-window layers (Gemma 3): a prompt's blocks are kept only while its cache holds every position
of every layer (shorter than the window); past it the sliding layers hold only their last window - 1 positions, so
nothing is kept from it (the reason is said). It may still reuse blocks kept by shorter prompts: the past is cut to
each sliding layer's window, as a chunked prefill holds it.

    reuse = ServerReuse()
    past = reuse.take(lm, ids, captured=True, keep_attention=True)    # Past(n=32, ...)
    run = run_prefill(lm, ids, past=past)
    reuse.keep(lm, ids, run.kv_cache, run.prefill)                    # None, or why nothing was kept
"""
from __future__ import annotations

import threading

from pipeline.model.interface import LanguageModel
from pipeline.model.kv_tensors import cache_layers, cache_of
from pipeline.model.past import NOTHING, Past, captures_at
from pipeline.prompt_cache.engine import Block, PrefixCache, PrefixCacheConfig, block_layers
from pipeline.prompt_cache.outcomes import blocks_not_kept


class ServerReuse:
    """One PrefixCache per model (each its own byte budget), shared by the queue's engines."""

    def __init__(self, config: PrefixCacheConfig | None = None):
        self.config = config or PrefixCacheConfig()
        self.caches: dict[int, PrefixCache] = {}  # id(lm) -> its cache (K/V of one model fit that model only)
        self._lock = threading.Lock()

    def cache_for(self, lm: LanguageModel) -> PrefixCache:
        with self._lock:
            return self.caches.setdefault(id(lm), PrefixCache(self.config))

    def take(self, lm: LanguageModel, ids: list[int], captured: bool = False, keep_attention: bool = False) -> Past:
        def usable(block: Block) -> bool:
            if not captured:
                return True
            return block.captures is not None and (not keep_attention or "attention" in block.captures)

        blocks = self.cache_for(lm).take(ids, usable)
        if not blocks:
            return NOTHING
        return Past(len(blocks) * self.config.block_size, cache_of(block_layers(blocks, lm), lm.config),
                    [b.captures for b in blocks] if captured else [])

    def keep(self, lm: LanguageModel, ids: list[int], kv_cache, prefill=None) -> str | None:
        why = blocks_not_kept(len(ids), min(k.shape[2] for k, _ in cache_layers(kv_cache)))
        if why:  # a sliding layer past its window: the early positions are gone
            return why
        capture = None if prefill is None else (lambda start, stop: captures_at(prefill, start, stop))
        self.cache_for(lm).keep(ids, kv_cache, capture)
        return None

    def clear(self) -> None:
        with self._lock:
            for cache in self.caches.values():
                cache.clear()
