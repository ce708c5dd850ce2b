"""Prompt-cache benchmark: time to first token with a ~1,000-token shared prefix, hit vs cold.

Both are measured in the same run, interleaved, on the same request B:
  cold = B with nothing reused, hit = B after request A (same prefix, other question) filled the cache.
Goal: median hit <= 0.2 x median cold. Also: bytes the cache holds per cached token vs the KV formula.

Run: .venv/bin/python bench/prefix_cache_bench.py [--repeats 5] [--block-size 16]
"""
from __future__ import annotations

import argparse
import statistics

from pipeline.model.dims import kv_bytes_formula
from pipeline.model.loader import shared_model
from pipeline.prompt_cache.engine import PrefixCache, PrefixCacheConfig
from pipeline.prompt_cache.playback import prompt_tokens
from pipeline.prompt_cache.scenarios import INSTRUCTIONS, QUESTION_1, QUESTION_2, Prompt

VARIETIES = ["Roma", "Cherokee Purple", "Sungold", "Brandywine", "San Marzano", "Black Krim"]
TARGET_PREFIX_TOKENS = 1000


def handbook(lines: int) -> str:
    """A long, stable system prompt: the instructions plus one note per bed and week."""
    notes = [f"Week {n // 12 + 1}, bed {n % 12 + 1}: {VARIETIES[n % 6]} plants, watered {n % 3 + 1} times, "
             f"{n % 5} fruits picked, leaves {'healthy' if n % 4 else 'spotted, lowest ones removed'}."
             for n in range(lines)]
    return INSTRUCTIONS + "\nGarden log:\n" + "\n".join(notes)


def build_requests(lm) -> tuple[list[int], list[int], int]:
    """Grow the log until A and B share about TARGET_PREFIX_TOKENS tokens."""
    lines = 10
    while True:
        system = handbook(lines)
        a = prompt_tokens(lm, Prompt("A", (("system", system), ("user", QUESTION_1))))[0]
        b = prompt_tokens(lm, Prompt("B", (("system", system), ("user", QUESTION_2))))[0]
        shared = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
        if shared >= TARGET_PREFIX_TOKENS:
            return a, b, shared
        lines += 2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--block-size", type=int, default=16)
    args = ap.parse_args(argv)

    lm = shared_model()
    a, b, shared = build_requests(lm)
    print(f"model {lm.name} on {lm.device}; request A {len(a)} tokens, request B {len(b)} tokens, "
          f"shared prefix {shared} tokens, block size {args.block_size}")
    config = PrefixCacheConfig(block_size=args.block_size)
    PrefixCache(config).serve(lm, b[:64], reuse=False, store=False)  # warm-up pass, not timed

    cache = PrefixCache(config)
    cache.serve(lm, a)  # fills the cache with A's full blocks
    cold_s, hit_s = [], []
    for _ in range(args.repeats):
        cold = PrefixCache(config).serve(lm, b, reuse=False, store=False)
        hit = cache.serve(lm, b, store=False)
        cold_s.append(cold.stats.ttft_s)
        hit_s.append(hit.stats.ttft_s)
    same = hit.stats.first_token_id == cold.stats.first_token_id
    max_diff = float((hit.last_logits - cold.last_logits).abs().max())
    cold_med, hit_med = statistics.median(cold_s), statistics.median(hit_s)
    ratio = hit_med / cold_med

    print(f"\nTTFT over {args.repeats} interleaved runs (median):")
    print(f"  cold (all {len(b)} tokens computed):          {cold_med * 1e3:8.1f} ms   runs: "
          + ", ".join(f"{t * 1e3:.0f}" for t in cold_s))
    print(f"  hit  ({hit.stats.tokens_reused} reused, {hit.stats.tokens_computed} computed): "
          f"{hit_med * 1e3:8.1f} ms   runs: " + ", ".join(f"{t * 1e3:.0f}" for t in hit_s))
    print(f"  hit / cold = {ratio:.3f}  (goal <= 0.2: {'met' if ratio <= 0.2 else 'NOT met'})")
    print(f"  same first token: {same}; max |logit difference| hit vs cold: {max_diff:.2e}")

    d = lm.dims
    per_token_formula = kv_bytes_formula(d.L, d.Hkv, d.Dh, 1, d.bytes_per_value)
    per_token_held = cache.bytes_held / cache.tokens_held
    print(f"\nBytes held: {cache.bytes_held:,} B for {cache.tokens_held} cached tokens "
          f"({len(cache.blocks)} blocks of {args.block_size}); A's last {len(a) % args.block_size} tokens "
          f"were a partial block, not cached")
    print(f"  per cached token: {per_token_held:,.0f} B; KV formula 2 x L{d.L} x Hkv{d.Hkv} "
          f"x Dh{d.Dh} x {d.bytes_per_value} B = {per_token_formula:,} B "
          f"(ratio {per_token_held / per_token_formula:.3f})")
    ok = ratio <= 0.2 and same and per_token_held == per_token_formula
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
