"""Prompt caching (playback): scenarios played through a real PrefixCache on the model, with each
request's blocks explained in words. Plain records out (no tensors), for the page and the CLI."""
from __future__ import annotations

import platform
import time
from typing import TYPE_CHECKING

from pipeline.core.errors import InputError
from pipeline.core.timing import interleave_less_work
from pipeline.costs.pass_costs import pass_cost, prefill_cost
from pipeline.model.dims import ModelDims
from pipeline.model.interface import LanguageModel
from pipeline.prompt_cache.scenarios import Prompt, Scenario
from pipeline.stages.request import ChatRequest, parse_turns
from pipeline.stages.tokens import tokenize_request
from pipeline.text.counts import plural
from pipeline.text.token_names import token_text as _token_text

if TYPE_CHECKING:  # the engine holds tensors: torch is imported when a scenario is played, not with the page
    from pipeline.prompt_cache.engine import PrefixCache


def prompt_tokens(lm: LanguageModel, prompt: Prompt) -> tuple[list[int], list[str], list[str]]:
    """(ids, readable token texts, roles) exactly as the app tokenizes a request."""
    tokens = tokenize_request(lm.tokenizer, ChatRequest(prompt.messages), prompt.template).tokens
    return [t.id for t in tokens], [t.text for t in tokens], [t.role for t in tokens]


def token_text(lm: LanguageModel, token_id: int | None) -> str:
    return "" if token_id is None else _token_text(lm.tokenizer, token_id)


def explain(stats: dict, cached_text: str, new_text: str) -> str:
    """The reason for the row of blocks, in words."""
    bs, d = stats["block_size"], stats["divergence"]
    tail = stats["n_tokens"] % bs
    partial = f" The last {plural(tail, 'token')} fill only part of a block: always computed, never stored." \
        if tail else ""
    if d is None:
        again = (" The last block was cached too, but it is run again: the model has to process the last prompt "
                 "token to score the next one.") if stats.get("blocks_recomputed") else ""
        return f"Every full block was already cached: {plural(stats['tokens_reused'], 'token')} reused.{again}{partial}"
    i = d["token_index"]
    if d["kind"] == "cache ends" and i == 0:
        return ("Nothing in the cache starts like this prompt: all of it is computed, and its full blocks are kept."
                f"{partial}")
    if d["kind"] == "cache ends":
        return (f"The cache holds nothing past token {i} on this path: the earlier request ended there, or its last "
                f"tokens formed a partial block, which is never stored. From token {i} on, everything is computed."
                f"{partial}")
    return (f"Token {i} differs: the cached prompt had '{cached_text}', this one has '{new_text}'. "
            f"From there on every block is computed: a block's key covers all the tokens before it, so nothing "
            f"after a difference can match, even identical text.{partial}")


def cold_ttft(lm: LanguageModel, ids: list[int], block_size: int) -> float:
    """The same request with nothing reused and nothing kept."""
    from pipeline.prompt_cache.engine import PrefixCache, PrefixCacheConfig

    return PrefixCache(PrefixCacheConfig(block_size=block_size)).serve(lm, ids, reuse=False, store=False).stats.ttft_s


def play_scenario(lm: LanguageModel, scenario: Scenario, block_size: int = 16, measure_cold: bool = True,
         cache: PrefixCache | None = None) -> list[dict]:
    """Serve each request in order through one cache. Plain records (no tensors), one per request."""
    from pipeline.prompt_cache.engine import PrefixCache, PrefixCacheConfig

    cache = cache or PrefixCache(PrefixCacheConfig(block_size=block_size))
    if measure_cold:  # one short warm-up pass, so the first timed request does not pay for it
        PrefixCache().serve(lm, prompt_tokens(lm, scenario.prompts[0])[0][:8], reuse=False, store=False)
    rows = []
    for prompt in scenario.prompts:
        rows.append(serve_prompt(lm, cache, prompt, measure_cold))
    return rows


TIMING_REPEATS = 3  # interleaved hit / cold pairs per request


def serve_prompt(lm: LanguageModel, cache: PrefixCache, prompt: Prompt, measure_cold: bool = True) -> dict:
    """Serve one request through the cache; with measure_cold and something reused, time it again as it
    met the cache and cold, interleaved and repeated (medians and ranges), measured again when the result
    contradicts the work (then marked noise), so a busy machine cannot invert the lesson. A request that
    reuses nothing does the same work either way: it is not timed twice (`timing` stays None).
    What does not depend on load leads: tokens computed vs reused, and the work that implies."""
    ids, texts, roles = prompt_tokens(lm, prompt)
    before = cache.snapshot() if measure_cold else None
    stats = cache.serve(lm, ids).stats.to_dict()
    d = stats["divergence"] or {}
    cached_text, new_text = token_text(lm, d.get("cached_token_id")), token_text(lm, d.get("new_token_id"))
    row = {
        "label": prompt.label, "note": prompt.note, "ids": ids, "tokens": texts, "roles": roles,
        "stats": stats, "reason": explain(stats, cached_text, new_text),
        "cached_token": cached_text, "new_token": new_text,
        "ttft_cold_s": None, "timing": None, "measured_at": None, "measured_on": None,
        **dict(zip(("flops_computed", "flops_cold"), work_flops(lm.dims, stats))),
        "kv_bytes_read": lm.dims.kv_bytes(stats["tokens_reused"]),
        "session_hit_rate": cache.token_hit_rate, "bytes_held": cache.bytes_held,
        "formula_bytes": cache.formula_bytes(lm.dims),
    }
    if measure_cold and stats["tokens_reused"]:  # nothing reused = the same work twice: nothing to compare
        bs = cache.config.block_size
        timing = interleave_less_work(lambda: before.snapshot().serve(lm, ids, store=False).stats.ttft_s,
                                      lambda: cold_ttft(lm, ids, bs), TIMING_REPEATS)
        row.update(ttft_cold_s=timing.b_median, timing=timing, measured_at=time.time(), measured_on=platform.node())
    return row


def work_flops(dims: ModelDims, stats: dict) -> tuple[int, int]:
    """(FLOPs of the pass this request ran: the tokens after the reused ones, FLOPs of the same prompt cold), both
    from serving.costs.pass_cost, the one count Prefill & decode uses too (embedding lookups free, the LM head for
    the last position only)."""
    n, reused = stats["n_tokens"], stats["tokens_reused"]
    computed = pass_cost(dims, n - reused, reused).flops if n > reused else 0
    return computed, prefill_cost(dims, n).flops


def compare_texts(lm: LanguageModel, text_a: str, text_b: str, block_size: int = 16, measure_cold: bool = True,
                  max_prompt_tokens: int | None = None) -> list[dict]:
    """Request A then request B through a fresh cache (raises InputError if either is invalid or
    longer than `max_prompt_tokens`)."""
    prompts = (Prompt("Request A", parse_turns(text_a, "request A", first_role="user")),
               Prompt("Request B", parse_turns(text_b, "request B", first_role="user"), "after A"))
    limit = min(lm.dims.context_window, max_prompt_tokens or lm.dims.context_window)
    for prompt in prompts:
        n = len(prompt_tokens(lm, prompt)[0])
        if n > limit:
            raise InputError(prompt.label.lower(), f"is {n:,} tokens; at most {limit:,} are run here.")
    return play_scenario(lm, Scenario("compare", "Your two requests", "conversation", "", prompts), block_size,
                         measure_cold)
