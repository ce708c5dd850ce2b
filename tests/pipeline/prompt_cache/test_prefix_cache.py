"""Prefix cache: reused K/V give the same logits, and the bookkeeping is right.

The bookkeeping (hits, misses, LRU, expiry, traps and fixes) depends on token ids only, so it runs on a
tiny random-weight Llama with the real tokenizer (fast tier). Logits equality runs on the tiny model and,
marked `model`, on the real SmolLM2.
"""
import pytest
import torch
from kit.tiny_models import make_tiny_lm
from kit.tolerance import assert_within, forward_tolerance, logits_tolerance, scale

from pipeline.core.errors import InputError
from pipeline.model.kv_tensors import cache_layers
from pipeline.prompt_cache.engine import (
    HIT,
    MISS,
    NOT_CACHEABLE,
    RECOMPUTED,
    PrefixCache,
    PrefixCacheConfig,
    chain_hashes,
)
from pipeline.prompt_cache.playback import explain, play_scenario, prompt_tokens
from pipeline.prompt_cache.scenarios import TRAPS, scenarios

TEXT = ("The tomato plant grows best in warm sun, in deep soil, with water at the base every morning. "
        "Pinch the side shoots, tie the stem to a cane, and pick the fruit when it turns deep red. ") * 3

MODELS = [pytest.param("tiny_lm", id="tiny"), pytest.param("tiny_gemma_lm", id="tiny-gemma3"),
          pytest.param("lm", id="smollm2", marks=pytest.mark.model)]


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def any_lm(request):
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="module")
def tiny_gemma_lm(tokenizer):
    """A tiny Gemma 3 (sliding window of 4 in two of its three layers: shorter than every prompt here)."""
    from kit.tiny_models import tiny_gemma3

    from pipeline.model.loader import LoadedModel

    return LoadedModel(model=tiny_gemma3(tokenizer).eval(), tokenizer=tokenizer, name="tiny-gemma3",
                       device=torch.device("cpu"))


@pytest.fixture(scope="module")
def ids(tokenizer):
    out = tokenizer(TEXT)["input_ids"]
    assert len(out) >= 100
    return out


def full_logits(lm, ids):
    with torch.inference_mode():
        return lm.model(input_ids=torch.tensor([ids], device=lm.device)).logits[0, -1].float().cpu()  # (V,)


# ---- real K/V: logits from reused blocks equal a full recompute ---------------------------------
@pytest.mark.parametrize("any_lm", MODELS, indirect=True)
def test_logits_from_a_cache_hit_equal_a_full_recompute(any_lm, ids):
    lm = any_lm
    cache = PrefixCache(PrefixCacheConfig(block_size=16))
    cache.serve(lm, ids[:80] + [lm.tokenizer.eos_token_id])  # stores 5 blocks = 80 tokens
    request = ids[:100]
    served = cache.serve(lm, request)
    assert served.stats.tokens_reused == 80  # really served from the cache
    assert served.stats.tokens_computed == 20
    expected = full_logits(lm, request)
    tol = logits_tolerance(lm, request)  # passes over other chunks of the same positions: float32 rounding apart
    assert_within(served.last_logits, expected, tol, "served from reused blocks")
    cold = PrefixCache().serve(lm, request, reuse=False, store=False)
    assert cold.stats.tokens_reused == 0
    assert_within(cold.last_logits, expected, tol, "served cold")


@pytest.mark.parametrize("any_lm", MODELS, indirect=True)
def test_reused_blocks_hold_the_real_keys_and_values(any_lm, ids):
    lm = any_lm
    cache = PrefixCache(PrefixCacheConfig(block_size=8))
    cache.serve(lm, ids[:40])
    with torch.inference_mode():
        out = lm.model(input_ids=torch.tensor([ids[:40]], device=lm.device), use_cache=True)
    layer = lm.dims.L - 1
    k0, v0 = cache_layers(out.cache)[layer]  # (1, Hkv, T, Dh)
    second = cache.blocks[chain_hashes(ids[:40], 8)[1]]  # tokens 8..15
    for got, want in ((second.keys[layer], k0[0, :, 8:16]), (second.values[layer], v0[0, :, 8:16])):
        assert_within(got, want, forward_tolerance(lm.dims, scale(want), 40), "the last layer's keys and values")


@pytest.mark.parametrize("any_lm", MODELS, indirect=True)
def test_whole_prompt_cached_still_computes_the_last_token(any_lm, ids):
    lm = any_lm
    cache = PrefixCache(PrefixCacheConfig(block_size=8))
    cache.serve(lm, ids[:32])
    again = cache.serve(lm, ids[:32])
    assert again.stats.tokens_reused == 24 and again.stats.tokens_computed == 8  # the last block runs again
    assert_within(again.last_logits, full_logits(lm, ids[:32]), logits_tolerance(lm, ids[:32]), "the last block again")


# ---- bookkeeping on the tiny model ----------------------------------------------------------------
def test_chained_hash_a_changed_early_token_misses_every_later_block(tiny_lm, ids):
    request = ids[:64]
    changed = list(request)
    changed[3] = changed[3] + 1
    a, b = chain_hashes(request, 16), chain_hashes(changed, 16)
    assert len(a) == 4 and all(x != y for x, y in zip(a, b))  # block 3 has identical tokens, yet another key
    assert request[48:64] == changed[48:64]
    cache = PrefixCache(PrefixCacheConfig(block_size=16))
    cache.serve(tiny_lm, request + [42])
    stats = cache.serve(tiny_lm, changed + [42]).stats
    assert stats.blocks_hit == 0 and stats.blocks_missed == 4
    assert stats.divergence.token_index == 3 and stats.divergence.kind == "changed"
    assert stats.divergence.cached_token_id == request[3] and stats.divergence.new_token_id == changed[3]


def test_chain_hashes_by_hand():
    """[1, 2, 3, 4, 5], block size 2: two keys, each sha256 over its parent key and the block's ids."""
    import hashlib

    from pipeline.prompt_cache.engine import ROOT_KEY

    k0 = hashlib.sha256(ROOT_KEY + b"|1,2").digest()
    k1 = hashlib.sha256(k0 + b"|3,4").digest()
    assert chain_hashes([1, 2, 3, 4, 5], 2) == [k0, k1]
    assert chain_hashes([1], 2) == [] and chain_hashes([], 2) == []
    assert chain_hashes([12, 3], 2) != chain_hashes([1, 23], 2)  # ids are separated, not glued


@pytest.mark.parametrize("a, b", [("tomato", "tomb"), ("tomato", "tomato"), ("", "x"), ("ab", "abc"), ("x", "y"),
                                  (b"\x01\x02\x03\x04", b"\x01\x02\x09"), ([1, 2, 3], [1, 2]),
                                  ([5, 6, 7, 8], (5, 6, 9)), ((1, 2), [1, 2, 3]), ("토마토", "토마도")])
def test_common_prefix_len_against_the_standard_library(a, b):
    """The one common-prefix length (engine, audit radix tree, audit traps) against os.path.commonprefix."""
    import os

    from pipeline.core.common_prefix import common_prefix_len

    expected = len(os.path.commonprefix([list(a), list(b)]))
    assert common_prefix_len(a, b) == common_prefix_len(b, a) == expected


def test_partial_blocks_are_not_stored(tiny_lm, ids):
    cache = PrefixCache(PrefixCacheConfig(block_size=16))
    stats = cache.serve(tiny_lm, ids[:40]).stats
    assert stats.block_status == [MISS, MISS, NOT_CACHEABLE]
    assert len(cache.blocks) == 2 and cache.tokens_held == 32
    again = cache.serve(tiny_lm, ids[:50]).stats  # tokens 32..39 were sent before but formed a partial block
    assert again.tokens_reused == 32
    assert again.divergence.kind == "cache ends" and again.divergence.token_index == 32


def test_hand_worked_stats(tiny_lm, ids):
    """Block size 4. A: 10 tokens -> blocks [miss, miss, partial(2)].
    B: A[:6] + a changed token 6 + 6 more, 13 tokens -> [hit, miss, miss, partial(1)], 4 reused, diverges at 6."""
    cache = PrefixCache(PrefixCacheConfig(block_size=4))
    a = ids[:10]
    first = cache.serve(tiny_lm, a).stats
    assert first.block_status == [MISS, MISS, NOT_CACHEABLE]
    assert (first.blocks_hit, first.blocks_missed, first.blocks_not_cacheable) == (0, 2, 1)
    assert first.tokens_reused == 0 and first.blocks_stored == 2
    b = a[:6] + [a[6] + 7] + ids[20:26]
    second = cache.serve(tiny_lm, b).stats
    assert len(b) == 13
    assert second.block_status == [HIT, MISS, MISS, NOT_CACHEABLE]
    assert second.tokens_reused == 4 and second.tokens_computed == 9
    assert second.divergence.token_index == 6 and second.divergence.new_token_id == a[6] + 7
    assert second.blocks_stored == 2 and len(cache.blocks) == 4
    assert cache.token_hit_rate == pytest.approx(4 / 23)
    assert cache.block_hit_rate == pytest.approx(1 / 5)
    d = second.to_dict()
    assert (d["blocks_hit"], d["blocks_missed"], d["blocks_not_cacheable"]) == (1, 2, 1)
    assert d["divergence"]["token_index"] == 6


def test_bytes_held_equal_the_kv_formula(tiny_lm, ids):
    cache = PrefixCache(PrefixCacheConfig(block_size=16))
    cache.serve(tiny_lm, ids[:70])
    c = tiny_lm.config
    per_token = 2 * c.num_hidden_layers * c.num_key_value_heads * (c.hidden_size // c.num_attention_heads) * 4
    assert cache.tokens_held == 64
    assert cache.bytes_held == cache.formula_bytes(tiny_lm.dims) == 64 * per_token


def test_lru_eviction_within_a_byte_budget(tiny_lm, ids):
    block = PrefixCache(PrefixCacheConfig(block_size=8))
    block.serve(tiny_lm, ids[:9])
    one_block = block.bytes_held
    cache = PrefixCache(PrefixCacheConfig(block_size=8, max_bytes=3 * one_block))
    a, b, c = ids[:17], ids[30:47], ids[60:77]  # two full blocks each
    cache.serve(tiny_lm, a)
    assert cache.bytes_held == 2 * one_block
    stats = cache.serve(tiny_lm, b).stats  # 4 blocks wanted, 3 fit: the oldest (A's tail, touched first) goes
    assert stats.blocks_evicted == 1 and cache.bytes_held == 3 * one_block
    assert chain_hashes(a, 8)[0] in cache.blocks and chain_hashes(a, 8)[1] not in cache.blocks
    cache.serve(tiny_lm, a[:9])  # A's first block is used again: now the most recent
    cache.serve(tiny_lm, c)
    assert cache.bytes_held <= 3 * one_block
    assert chain_hashes(a, 8)[0] in cache.blocks  # recently used, kept
    assert not any(k in cache.blocks for k in chain_hashes(b, 8))  # least recently used, evicted


def test_expiry_after_idle_time(tiny_lm, ids):
    clock = FakeClock()
    cache = PrefixCache(PrefixCacheConfig(block_size=16, ttl_seconds=300), clock=clock)
    request = ids[:50]
    cache.serve(tiny_lm, request)
    clock.now = 299
    assert cache.serve(tiny_lm, request).stats.tokens_reused == 48  # still fresh; using it resets the timer
    clock.now = 299 + 301
    stats = cache.serve(tiny_lm, request).stats
    assert stats.tokens_reused == 0 and stats.blocks_missed == 3
    clock.now += 10
    assert cache.expire() == 0 and len(cache.blocks) == 3  # the blocks just stored are fresh


@pytest.mark.parametrize("trap", [key for key, _ in TRAPS])
def test_each_trap_misses_and_its_fix_hits(tiny_lm, trap):
    all_scenarios = scenarios()
    results = {}
    for kind in ("trap", "fixed"):
        scenario = all_scenarios[f"{trap}_{kind}"]
        first, second = (prompt_tokens(tiny_lm, p)[0] for p in scenario.prompts)
        shared = next((i for i, (x, y) in enumerate(zip(first, second)) if x != y), min(len(first), len(second)))
        second_stats = play_scenario(tiny_lm, scenario, measure_cold=False)[1]["stats"]
        # exactly the full blocks before the first difference are reused
        assert second_stats["tokens_reused"] == min(shared, len(second) - 1) // 16 * 16
        results[kind] = (second_stats, len(second))
    trap_stats, n_trap = results["trap"]
    fixed_stats, n_fixed = results["fixed"]
    assert fixed_stats["tokens_reused"] >= 0.6 * n_fixed, "the fix should reuse most of the prompt"
    assert trap_stats["tokens_reused"] < fixed_stats["tokens_reused"] - 32  # several more blocks hit when fixed
    assert trap_stats["divergence"]["kind"] == "changed"
    if fixed_stats["divergence"] is not None:
        assert trap_stats["divergence"]["token_index"] < fixed_stats["divergence"]["token_index"]


def test_conversation_reuses_the_history(tiny_lm):
    rows = play_scenario(tiny_lm, scenarios()["conversation"], measure_cold=False)
    reused = [r["stats"]["tokens_reused"] for r in rows]
    assert reused[0] == 0
    assert all(later > earlier for earlier, later in zip(reused, reused[1:]))
    for earlier, later in zip(rows, rows[1:]):  # everything the previous turn had in full blocks is reused
        full = earlier["stats"]["n_tokens"] // 16 * 16
        assert later["stats"]["tokens_reused"] >= full
    assert rows[-1]["bytes_held"] == rows[-1]["formula_bytes"]


def test_only_requests_that_reuse_something_are_timed_against_cold(tiny_lm):
    """Nothing reused = the same work as cold: no comparison (it once claimed 'cold is 2.2x faster')."""
    rows = play_scenario(tiny_lm, scenarios()["conversation"], measure_cold=True)
    assert rows[0]["stats"]["tokens_reused"] == 0 and rows[0]["timing"] is None
    assert all(r["timing"] is not None and r["measured_at"] for r in rows[1:])


def test_fully_cached_prompt_reruns_its_last_block_and_says_so(tiny_lm, ids):
    """Block size 4, 8 tokens twice: the second time block 0 hits, block 1 is cached but run again
    (the model must process the last prompt token), so 4 tokens are reused, not 8."""
    cache = PrefixCache(PrefixCacheConfig(block_size=4))
    cache.serve(tiny_lm, ids[:8])
    again = cache.serve(tiny_lm, ids[:8]).stats
    assert again.block_status == [HIT, RECOMPUTED]
    assert (again.blocks_hit, again.blocks_recomputed, again.blocks_missed) == (1, 1, 0)
    assert again.tokens_reused == 4 and again.tokens_computed == 4 and again.blocks_stored == 0
    assert "run again" in explain(again.to_dict(), "", "")


def test_prompt_longer_than_the_context_window_is_refused(tokenizer, ids):
    small = make_tiny_lm(tokenizer, max_position_embeddings=32)
    cache = PrefixCache(PrefixCacheConfig(block_size=8))
    assert cache.serve(small, ids[:32]).stats.n_tokens == 32  # exactly the window: accepted
    with pytest.raises(InputError) as err:
        cache.serve(small, ids[:33])
    assert err.value.field == "messages" and "context window" in str(err.value)
    with pytest.raises(InputError):
        cache.serve(small, [])
    with pytest.raises(InputError) as err:
        PrefixCache(PrefixCacheConfig(block_size=0))
    assert err.value.field == "block_size"
