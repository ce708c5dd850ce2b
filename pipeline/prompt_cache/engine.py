"""Prompt caching (the engine): prefix caching across requests, real K/V blocks kept after one request
and reused by the next.

How it works (the scheme of vLLM's automatic prefix caching):
- The prompt is cut into fixed-size blocks of `block_size` tokens. Only full blocks are cached;
  the tail that does not fill a block is computed every time ("not cacheable").
- Each block's key is a hash chained over every token before it and in it:
  key[i] = sha256(key[i-1] + ids of block i), so block i matches only if the whole prefix
  up to its end matches. Change token 3 and every later block misses.
- A request reuses the longest run of cached blocks from its start, builds a KV cache from
  their stored tensors and runs the model on the remaining tokens only (positions continue
  from the reused length, so RoPE is the same as in a full run). Then it stores its own new
  full blocks.
- Blocks are evicted least-recently-used first when the byte budget is exceeded, and expire
  after `ttl_seconds` without use.
- The server's queue serves every request through one of these per model (pipeline.prompt_cache.reuse): `take`
  the cached blocks a prompt starts with, run the rest, `keep` its new blocks. A block kept by a captured run also
  holds that run's captures at its positions, so a captured run that reuses it still shows every position.

Shape letters: L layers, Hkv key/value heads, T positions, Dh head width, Bs block size, V vocabulary.
"""
from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import torch

from pipeline.core.common_prefix import common_prefix_len
from pipeline.core.errors import InputError
from pipeline.model.hf_imports import transformers_names
from pipeline.model.interface import LanguageModel
from pipeline.model.kv_tensors import cache_layers
from pipeline.prompt_cache.outcomes import HIT, MISS, NOT_CACHEABLE, RECOMPUTED

DynamicCache, = transformers_names("DynamicCache")

ROOT_KEY = b"prefix-cache-root"  # parent of the first block


@dataclass
class PrefixCacheConfig:
    block_size: int = 16  # vLLM's default block size; small enough that short prompts get blocks
    max_bytes: int = 512 * 2**20  # ~11,600 tokens of SmolLM2 K/V in float32 (46,080 B/token)
    ttl_seconds: float = 300.0  # providers drop cached prefixes after about five idle minutes


@dataclass
class Block:
    key: bytes  # chained hash of every token up to the end of this block
    parent: bytes  # key of the previous block (ROOT_KEY for the first one)
    token_ids: tuple[int, ...]  # (Bs,)
    keys: torch.Tensor  # (L, Hkv, Bs, Dh) post-RoPE keys, on the model's device
    values: torch.Tensor  # (L, Hkv, Bs, Dh)
    last_used: float
    # the captured run's tensors at these positions (pipeline.model.past.captures_at), by Prefill field name;
    # None: kept by a run that captured nothing (the plain path, the Prompt caching page)
    captures: dict[str, np.ndarray] | None = None

    @property
    def nbytes(self) -> int:
        kv = self.keys.numel() * self.keys.element_size() + self.values.numel() * self.values.element_size()
        return kv + sum(a.nbytes for a in (self.captures or {}).values())


@dataclass
class Divergence:
    """Where this request stopped matching the best cached candidate."""

    token_index: int  # first position whose token differs (or where the cached path ends)
    kind: str  # "changed": a different token | "cache ends": nothing cached past this point
    cached_token_id: int | None = None  # what the cached candidate had there (None if it ends)
    new_token_id: int | None = None  # what this request has there


@dataclass
class RequestStats:
    n_tokens: int
    block_size: int
    block_status: list[str]  # per block: hit | miss | not cacheable
    tokens_reused: int  # K/V read from the cache, not recomputed
    tokens_computed: int  # run through the model for this request
    divergence: Divergence | None  # None when every full block was a hit
    ttft_s: float  # request in -> first token chosen (lookup + cache assembly + prefill + argmax)
    store_s: float  # time to keep the new blocks (after the first token)
    blocks_stored: int
    blocks_evicted: int
    bytes_held: int  # bytes in the cache after this request
    first_token_id: int

    @property
    def blocks_hit(self) -> int:
        return self.block_status.count(HIT)

    @property
    def blocks_missed(self) -> int:
        return self.block_status.count(MISS)

    @property
    def blocks_recomputed(self) -> int:
        return self.block_status.count(RECOMPUTED)

    @property
    def blocks_not_cacheable(self) -> int:
        return self.block_status.count(NOT_CACHEABLE)

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "divergence"}
        d["divergence"] = None if self.divergence is None else dict(self.divergence.__dict__)
        d.update(blocks_hit=self.blocks_hit, blocks_missed=self.blocks_missed,
                 blocks_recomputed=self.blocks_recomputed, blocks_not_cacheable=self.blocks_not_cacheable)
        return d


@dataclass
class ServeResult:
    stats: RequestStats
    last_logits: torch.Tensor  # (V,) float32 on CPU: scores for the token after the prompt


def chain_hashes(ids: list[int], block_size: int) -> list[bytes]:
    """One key per full block, each covering every token before it.

    [1, 2, 3, 4, 5] with block size 2 -> [h(root, 1 2), h(h(root, 1 2), 3 4)]; token 5 has no key.
    """
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise InputError("block_size", f"must be a whole number of at least 1, got {block_size!r}.")
    keys, parent = [], ROOT_KEY
    for start in range(0, len(ids) - block_size + 1, block_size):
        block = ids[start:start + block_size]
        parent = hashlib.sha256(parent + b"|" + ",".join(map(str, block)).encode()).digest()
        keys.append(parent)
    return keys


def block_layers(blocks: list[Block], lm: LanguageModel) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Stored blocks -> per layer (keys, values), each (1, Hkv, T, Dh) with T = len(blocks) * Bs, on the device
    of that layer (one GPU, or several with a device map)."""
    keys = torch.cat([b.keys for b in blocks], dim=2)  # (L, Hkv, T, Dh)
    values = torch.cat([b.values for b in blocks], dim=2)  # (L, Hkv, T, Dh)
    devices = [layer.self_attn.k_proj.weight.device for layer in lm.model.model.layers]
    return [(keys[i][None].to(d), values[i][None].to(d)) for i, d in enumerate(devices)]  # (1, Hkv, T, Dh)


def blocks_to_cache(blocks: list[Block], lm: LanguageModel) -> DynamicCache:
    """Stored blocks -> a DynamicCache the model can continue from (T = len(blocks) * Bs)."""
    return DynamicCache(ddp_cache_data=block_layers(blocks, lm))  # no config: see full_cache


def full_cache() -> DynamicCache:
    """A cache that keeps every position in every layer. With the model's config, HF's cache keeps only the last
    window - 1 positions of a sliding-window layer (Gemma 3), so the blocks of a longer prompt could not be cut
    out of it; the window itself is the attention mask's (the model applies it whatever the cache keeps)."""
    return DynamicCache()


def slice_block(cache, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions [start, stop) of every layer, copied so the block owns its memory: 2 x (L, Hkv, Bs, Dh).

    Kept on the first layer's device (layers may sit on different GPUs)."""
    layers = cache_layers(cache)  # per layer (1, Hkv, T, Dh)
    held = min(k.shape[2] for k, _ in layers)
    if held < stop:  # a sliding-window layer past its window keeps only its last positions (Gemma 3)
        raise InputError("prompt", f"this prompt is longer than the model's sliding window: those layers keep only "
                                   f"their last {held} positions, and the prefix cache stores every position of "
                                   f"every layer. Use a prompt of at most {held} tokens here.")
    home = layers[0][0].device
    keys = torch.stack([k[0, :, start:stop].to(home) for k, _ in layers]).clone()
    values = torch.stack([v[0, :, start:stop].to(home) for _, v in layers]).clone()
    return keys, values


class PrefixCache:
    """Blocks of K/V kept between requests, looked up by chained hash, evicted LRU within a budget."""

    def __init__(self, config: PrefixCacheConfig | None = None, clock=time.monotonic):
        self.config = config or PrefixCacheConfig()
        if self.config.block_size < 1:
            raise InputError("block_size", f"must be at least 1, got {self.config.block_size!r}.")
        self.clock = clock
        self.blocks: OrderedDict[bytes, Block] = OrderedDict()  # least recently used first
        self.children: dict[bytes, set[bytes]] = {}  # parent key -> keys of cached next blocks
        self.session_tokens = 0
        self.session_tokens_reused = 0
        self.session_blocks = 0  # full blocks seen
        self.session_blocks_hit = 0
        self._lock = threading.RLock()

    # ---- what the cache holds -------------------------------------------------------------
    @property
    def bytes_held(self) -> int:
        return sum(b.nbytes for b in self.blocks.values())

    @property
    def tokens_held(self) -> int:
        return len(self.blocks) * self.config.block_size

    def formula_bytes(self, dims) -> int:
        """What the KV formula predicts for the tokens held (must equal `bytes_held`)."""
        return dims.kv_bytes(self.tokens_held)

    @property
    def token_hit_rate(self) -> float:
        """Share of all prompt tokens this session that were read from the cache."""
        return self.session_tokens_reused / self.session_tokens if self.session_tokens else 0.0

    @property
    def block_hit_rate(self) -> float:
        return self.session_blocks_hit / self.session_blocks if self.session_blocks else 0.0

    # ---- lookup -------------------------------------------------------------------------
    def expire(self) -> int:
        """Drop blocks idle longer than ttl_seconds. Returns how many were dropped."""
        now = self.clock()
        old = [k for k, b in self.blocks.items() if now - b.last_used > self.config.ttl_seconds]
        return sum(self._drop(k) for k in old if k in self.blocks)

    def longest_cached_run(self, keys: list[bytes], n_tokens: int) -> int:
        """How many leading blocks are cached. At least one token is always left to compute,
        because the model must run on the last prompt token to score the next one."""
        usable = min(len(keys), (n_tokens - 1) // self.config.block_size)
        run = 0
        while run < usable and keys[run] in self.blocks:
            run += 1
        return run

    def find_divergence(self, ids: list[int], keys: list[bytes], run: int) -> Divergence | None:
        """Where the first missed block parts from the best cached block that could follow the hits.

        None when every full block hit (only a partial tail, if any, was computed).
        """
        if run == len(keys):
            return None
        start = run * self.config.block_size
        ahead = ids[start:start + self.config.block_size]  # the first missed block, (Bs,)
        # sorted: ties resolve the same way every run
        candidates = [self.blocks[k] for k in sorted(self._next(keys, run))]
        if not candidates:
            return Divergence(start, "cache ends")
        best = max(candidates, key=lambda b: common_prefix_len(ahead, b.token_ids))
        n = common_prefix_len(ahead, best.token_ids)
        if n == len(ahead):  # cached, but recomputed so the last prompt token runs through the model
            return None
        return Divergence(start + n, "changed", best.token_ids[n], ahead[n])

    def _next(self, keys: list[bytes], run: int) -> set[bytes]:
        parent = keys[run - 1] if run else ROOT_KEY
        return {k for k in self.children.get(parent, ()) if k in self.blocks}

    # ---- serving ------------------------------------------------------------------------
    def serve(self, lm: LanguageModel, ids: list[int], reuse: bool = True, store: bool = True) -> ServeResult:
        """Prefill `ids` reusing cached blocks; returns the first token's scores and the stats.

        reuse=False, store=False is the same request cold (nothing read, nothing kept).
        """
        if len(ids) < 1:
            raise InputError("messages", "the prompt has no tokens.")
        if len(ids) > lm.dims.context_window:
            raise InputError("messages", f"the prompt is {len(ids):,} tokens but the context window is "
                                         f"{lm.dims.context_window:,}; shorten it.")
        bs = self.config.block_size
        with self._lock:
            t0 = time.perf_counter()
            self.expire()
            keys = chain_hashes(ids, bs)
            run = self.longest_cached_run(keys, len(ids)) if reuse else 0
            divergence = self.find_divergence(ids, keys, run) if reuse else None
            hits = [self.blocks[k] for k in keys[:run]]
            reused = run * bs
            status = ([HIT] * run + [RECOMPUTED if reuse and k in self.blocks else MISS for k in keys[run:]]
                      + [NOT_CACHEABLE] * (len(ids) % bs > 0))
            logits, out_cache = self._prefill_rest(lm, ids, hits)
            first_token = int(torch.argmax(logits))  # .item() waits for the device: TTFT is real
            ttft = time.perf_counter() - t0
            t1 = time.perf_counter()
            self._touch(keys[:run])
            stored, evicted = self._store(ids, keys, run, out_cache) if store else (0, 0)
            store_s = time.perf_counter() - t1

            if reuse:
                self._count(len(ids), reused, len(keys), run)
            stats = RequestStats(
                n_tokens=len(ids), block_size=bs, block_status=status, tokens_reused=reused,
                tokens_computed=len(ids) - reused, divergence=divergence, ttft_s=ttft, store_s=store_s,
                blocks_stored=stored, blocks_evicted=evicted, bytes_held=self.bytes_held,
                first_token_id=first_token,
            )
            return ServeResult(stats, logits.float().cpu())

    def _prefill_rest(self, lm: LanguageModel, ids: list[int], hits: list[Block]):
        """Run the model on the tokens after the reused blocks. Returns ((V,) logits, full cache)."""
        reused = len(hits) * self.config.block_size
        cache = blocks_to_cache(hits, lm) if hits else full_cache()
        return lm.forward_chunked(ids[reused:], cache)  # (V,), per layer (1, Hkv, T, Dh)

    # ---- the server's queue: take, run the rest, keep -------------------------------------------
    def take(self, ids: list[int], usable: Callable[[Block], bool] = lambda block: True) -> list[Block]:
        """The cached blocks this prompt starts with, as many as lead it (at least one token left to run), up to
        the first one `usable` refuses (a captured run needs blocks that kept captures); marked used and counted
        in the hit rates. Nothing is stored here: the caller runs the rest, then `keep`s it.

            take(ids)  -> [Block(0..15), Block(16..31)]  # positions 0-31 need not run again
        """
        with self._lock:
            self.expire()
            keys = chain_hashes(ids, self.config.block_size)
            run = self.longest_cached_run(keys, len(ids))
            blocks = []
            for key in keys[:run]:
                if not usable(self.blocks[key]):
                    break
                blocks.append(self.blocks[key])
            self._touch(keys[:len(blocks)])
            self._count(len(ids), len(blocks) * self.config.block_size, len(keys), len(blocks))
            return blocks

    def keep(self, ids: list[int], cache, captures: Callable[[int, int], dict] | None = None) -> tuple[int, int]:
        """Keep the prompt's full blocks not cached yet from `cache` (a KV cache holding every prompt position in
        every layer: slice_block refuses one that does not), each with captures(start, stop) when given (a block
        cached without captures gets them); then evict LRU blocks over the budget. Returns (stored, evicted)."""
        with self._lock:
            return self._store(ids, chain_hashes(ids, self.config.block_size), 0, cache, captures)

    def _store(self, ids, keys, run, cache, captures: Callable[[int, int], dict] | None = None) -> tuple[int, int]:
        """Keep this request's new full blocks (from block `run` on); then evict LRU blocks over the budget."""
        stored = 0
        now = self.clock()
        bs = self.config.block_size
        for i in range(run, len(keys)):
            start = i * bs
            if keys[i] in self.blocks:  # cached, but recomputed (last block, or after a gap)
                block = self.blocks[keys[i]]
                block.last_used = now
                if captures is not None and block.captures is None:
                    block.captures = captures(start, start + bs)
                continue
            k, v = slice_block(cache, start, start + bs)
            parent = keys[i - 1] if i else ROOT_KEY
            self.blocks[keys[i]] = Block(keys[i], parent, tuple(ids[start:start + bs]), k, v, now,
                                         None if captures is None else captures(start, start + bs))
            self.children.setdefault(parent, set()).add(keys[i])
            stored += 1
        self._touch(keys)
        return stored, self._evict_over_budget()

    def _touch(self, keys: list[bytes]) -> None:
        """Mark blocks used now. The tail is touched first, so under pressure the end of a prefix
        is evicted before its start (a start without its end is still useful; the reverse is not)."""
        now = self.clock()
        for key in reversed(keys):
            if key in self.blocks:
                self.blocks[key].last_used = now
                self.blocks.move_to_end(key)

    def _evict_over_budget(self) -> int:
        evicted = 0
        while self.blocks and self.bytes_held > self.config.max_bytes:
            oldest = next(iter(self.blocks))
            evicted += self._drop(oldest)
        return evicted

    def _drop(self, key: bytes) -> int:
        """Remove a block and every cached block after it (they can no longer be reached)."""
        block = self.blocks.pop(key)
        self.children.get(block.parent, set()).discard(key)
        dropped = 1
        for child in list(self.children.pop(key, ())):
            if child in self.blocks:
                dropped += self._drop(child)
        return dropped

    def _count(self, n_tokens: int, reused: int, n_blocks: int, run: int) -> None:
        self.session_tokens += n_tokens
        self.session_tokens_reused += reused
        self.session_blocks += n_blocks
        self.session_blocks_hit += run

    def snapshot(self) -> "PrefixCache":
        """A copy holding the same blocks (tensors shared, not copied) for timing a request again
        exactly as it met the cache, without touching this cache."""
        with self._lock:
            copy = PrefixCache(self.config, self.clock)
            copy.blocks = OrderedDict((k, replace(b)) for k, b in self.blocks.items())
            copy.children = {k: set(v) for k, v in self.children.items()}
            return copy

    def clear(self) -> None:
        with self._lock:
            self.blocks.clear()
            self.children.clear()
