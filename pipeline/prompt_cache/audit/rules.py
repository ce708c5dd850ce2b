"""The published caching rules and default prices (`assets/cache_rules.json`, each rule with its source),
and what they say a provider caches: minimums, increments, blocks, TTLs."""
from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

from pipeline.prompt_cache.audit.log import LogRequest

ASSETS = Path(__file__).resolve().parents[3] / "assets"
RULES_PATH = ASSETS / "cache_rules.json"
PROVIDERS = ("openai", "anthropic", "vllm")


@lru_cache(maxsize=4)
def _rules_text(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def load_rules(path: str | os.PathLike | None = None) -> dict:
    """The published rules and the default prices (`assets/cache_rules.json`), each rule with its source."""
    return json.loads(_rules_text(str(path or RULES_PATH)))


def default_prices(rules: dict | None = None) -> dict[str, dict]:
    rules = rules or load_rules()
    return {p: dict(rules["providers"][p]["price"]) for p in PROVIDERS}


def anthropic_min_tokens(model: str | None, rules: dict) -> tuple[int, str]:
    """(minimum cacheable prefix, the model it was read for). A non-Claude model: the default model.

    'claude-3-5-haiku-20241022' -> (2048, ...); 'claude-sonnet-4-5' -> (1024, ...)
    """
    a = rules["providers"]["anthropic"]
    name = model if model and model.startswith("claude") else a["default_model"]
    for row in a["min_tokens_by_model"]:
        if any(part in name for part in row["match"]):
            return row["min_tokens"], name
    return a["default_min_tokens"], name


def openai_cached(shared: int, rules: dict) -> int:
    """Cached tokens OpenAI reports for a shared prefix: 0 below 1,024, then in steps of 128.

    1000 -> 0; 1024 -> 1024; 1300 -> 1280.
    """
    o = rules["providers"]["openai"]
    return 0 if shared < o["min_tokens"] else shared // o["increment"] * o["increment"]


def vllm_cached(shared: int, n_tokens: int, rules: dict) -> int:
    """Full blocks shared; the last prompt token is always computed (it yields the next token's scores).

    (40, 50) -> 32 with 16-token blocks; (50, 50) -> 48 (49 usable -> 3 blocks).
    """
    bs = rules["providers"]["vllm"]["block_size"]
    return min(shared, n_tokens - 1) // bs * bs if n_tokens else 0


def default_prefill_tps(rules: dict | None = None) -> dict[str, float]:
    """Each provider's stand-in prefill speed, tokens/s (`cache_rules.json`, each with where it comes from)."""
    rules = rules or load_rules()
    return {p: float(rules["providers"][p]["prefill_tps"]["value"]) for p in PROVIDERS}


def ttl_of(provider: str, rules: dict, requests: list[LogRequest]) -> float | None:
    p = rules["providers"][provider]
    if provider == "anthropic":
        long = any(r.auto_cache == "1h" or any(b.cache_ttl == "1h" for b in r.blocks) for r in requests)
        return p["ttl_seconds"]["1h" if long else "5m"]
    return p["ttl_seconds"]


def request_ttl(provider: str, r: LogRequest, ttls: dict, rules: dict) -> float | None:
    """Seconds an entry this request reads stays alive: OpenAI's follows the request's
    prompt_cache_retention ("in_memory" or "24h"), the others the log-wide `ttls`."""
    if provider == "openai" and r.cache_retention:
        return rules["providers"]["openai"]["retention_ttl_seconds"][r.cache_retention]
    return ttls.get(provider)
