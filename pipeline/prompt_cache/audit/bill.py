"""The bill: each request priced with and without caching, per provider, and the prefill time saved."""
from __future__ import annotations

import numbers

from pipeline.core.checks import is_finite  # a real number a float can hold (10**400 is not)
from pipeline.core.errors import InputError
from pipeline.prompt_cache.audit.log import MAX_OUTPUT_TOKENS
from pipeline.prompt_cache.audit.records import AuditReport, RequestRecord
from pipeline.prompt_cache.audit.rules import PROVIDERS, default_prefill_tps, default_prices

MIN_PREFILL_TPS = 1.0  # tokens/s; time saved is cached tokens / speed, which 1e-320 made infinite (not JSON)
PRICE_FIELDS = ("input_per_mtok", "cached_read_multiplier", "cache_write_5m_multiplier",
                "cache_write_1h_multiplier", "output_per_mtok")


def check_prices(prices: dict[str, dict]) -> dict[str, dict]:
    """Every provider with every price field a finite number >= 0 (InputError names the cell)."""
    if not isinstance(prices, dict):
        raise InputError("prices", f"must be a table of prices by provider, got {type(prices).__name__}.")
    out = {}
    for p in PROVIDERS:
        row = prices.get(p)
        if not isinstance(row, dict):
            raise InputError("prices", f"no prices for {p}.")
        out[p] = dict(row)
        for f in PRICE_FIELDS:
            v = row.get(f)
            if not is_finite(v) or v < 0:
                raise InputError("prices", f"{p} {f.replace('_', ' ')} must be a number of at least 0, "
                                           f"got {str(v)[:20]}.")
            out[p][f] = float(v)
    return out


def prefill_speeds(prefill_tps: float | dict | None) -> dict[str, float]:
    """Tokens/s per provider for "time saved": None -> the stand-ins; a number -> it for all; a dict -> per
    provider (missing ones from the stand-ins). 3000 -> {'openai': 3000.0, 'anthropic': 3000.0, 'vllm': 3000.0}"""
    speeds = default_prefill_tps()
    given = prefill_tps if isinstance(prefill_tps, dict) else {} if prefill_tps is None else \
        {p: prefill_tps for p in PROVIDERS}
    for p, v in given.items():
        if p not in speeds:
            raise InputError("prefill_tps", f"unknown provider {str(p)[:20]!r}; use {', '.join(PROVIDERS)}.")
        if not is_finite(v) or not v >= MIN_PREFILL_TPS:
            whose = f"{p}: " if isinstance(prefill_tps, dict) else ""  # one number (the CLI's) is everyone's
            raise InputError("prefill_tps", f"{whose}must be a number of tokens per second of at least "
                                            f"{MIN_PREFILL_TPS:g}, got {str(v)[:20]}.")
        speeds[p] = float(v)
    return speeds


def bill(report: AuditReport, prices: dict | None = None, prefill_tps: float | dict | None = None,
         output_tokens: int = 200) -> dict:
    """Cost per request and in total, with and without caching, per provider; and prefill time saved.

    prices: {provider: {input_per_mtok, cached_read_multiplier, cache_write_5m_multiplier,
    cache_write_1h_multiplier, output_per_mtok}}. prefill_tps: the provider's prefill speed, tokens/s
    (see `prefill_speeds`). output_tokens: per request when the log does not say.
    """
    prices = check_prices(prices or default_prices())
    speeds = prefill_speeds(prefill_tps)
    if isinstance(output_tokens, bool) or not isinstance(output_tokens, numbers.Integral) \
            or not 0 <= output_tokens <= MAX_OUTPUT_TOKENS:
        raise InputError("output_tokens", f"must be a whole number from 0 to {MAX_OUTPUT_TOKENS:,}, got "
                                          f"{str(output_tokens)[:20]}{'...' if len(str(output_tokens)) > 20 else ''}.")
    per_request, totals = [], {p: _zero() for p in PROVIDERS}
    for rec in report.requests:
        out = rec.output_tokens if rec.output_tokens is not None else output_tokens
        row = {}
        for p in PROVIDERS:
            row[p] = request_cost(rec, p, prices[p], out, speeds[p])
            for k, v in row[p].items():
                totals[p][k] += v
        per_request.append(row)
    for p in PROVIDERS:
        t = totals[p]
        t["hit_rate"] = t["cached_tokens"] / t["prompt_tokens"] if t["prompt_tokens"] else 0.0
    return {"requests": per_request, "totals": totals, "prices": prices, "prefill_tps": speeds,
            "default_output_tokens": output_tokens}


def _zero() -> dict:
    return {"prompt_tokens": 0, "cached_tokens": 0, "written_tokens": 0, "without_cache": 0.0, "with_cache": 0.0,
            "saved": 0.0, "latency_saved_s": 0.0}


def request_cost(rec: RequestRecord, provider: str, price: dict, output_tokens: int, prefill_tps: float) -> dict:
    """Dollars for one request: uncached at the input price, reads and writes at their multipliers.

    OpenAI and vLLM write for free (their write multipliers are not used); Anthropic writes cost
    1.25x (5 minutes) or 2x (1 hour).
    """
    n, per = rec.prompt_tokens, price["input_per_mtok"] / 1e6
    cached = rec.cached_tokens[provider]
    w5 = rec.anthropic.cache_creation_5m if provider == "anthropic" else 0
    w1 = rec.anthropic.cache_creation_1h if provider == "anthropic" else 0
    out = output_tokens * price["output_per_mtok"] / 1e6
    without = n * per + out
    with_cache = ((n - cached - w5 - w1) * per + cached * per * price["cached_read_multiplier"]
                  + w5 * per * price["cache_write_5m_multiplier"] + w1 * per * price["cache_write_1h_multiplier"]
                  + out)
    return {"prompt_tokens": n, "cached_tokens": cached, "written_tokens": w5 + w1, "without_cache": without,
            "with_cache": with_cache, "saved": without - with_cache, "latency_saved_s": cached / prefill_tps}
