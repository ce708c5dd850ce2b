"""Why each request's cache stops where it does: the trap or cause against the closest earlier request
(alive or not), an expired entry, or a provider rule that caches nothing of it."""
from __future__ import annotations

from dataclasses import dataclass, replace

from pipeline.prompt_cache.audit.log import LogRequest
from pipeline.prompt_cache.audit.radix import Cut
from pipeline.prompt_cache.audit.records import Divergence, Measured, Why
from pipeline.prompt_cache.audit.rules import openai_cached, request_ttl
from pipeline.prompt_cache.audit.tokens import TokenMemo, token_ids
from pipeline.prompt_cache.audit.traps import OTHER_FIXES, Finding, Side, classify, where
from pipeline.text.counts import plural

CONTEXT_TOKENS = 8  # tokens shown each side of a divergence


@dataclass(frozen=True)
class Replay:
    """What explaining any request of one audit needs."""

    requests: list[LogRequest]
    rendered: list[tuple[bytes, list[int]]]  # per request: (token ids as bytes, block starts)
    memo: TokenMemo
    times: list[float]  # seconds since the first request
    ttls: dict[str, float | None]  # log-wide TTL per provider
    provider: str  # whose TTL decides "expired"
    rules: dict


def explain(replay: Replay, i: int, rec: Measured, closest: Cut) -> Why:
    """Request i against `closest` (the longest prefix it shares with any earlier request): the cause, the fix."""
    requests, rules, provider = replay.requests, replay.rules, replay.provider
    pos, j, last_used = closest
    r = Side(requests[i], *replay.rendered[i])
    o = Side(requests[j], *replay.rendered[j]) if j >= 0 else None
    other = requests[j].number if j >= 0 else None
    finding = classify(r, o, pos, other)
    if finding.trap is None and _expiry_cost(rec, provider, pos, rules):
        finding = Finding("expired", None, f"Request {other} shares {plural(pos, 'token')} with this one, "
                                           f"but that prefix was last used {_ago(replay.times[i] - last_used)} before "
                                           f"and the cache entry had expired ({rules['providers'][provider]['label']} "
                                           f"keeps one {_ago(request_ttl(provider, requests[i], replay.ttls, rules))} "
                                           f"after its last use; each read refreshes it).", OTHER_FIXES["expired"])
    why_not = uncached_reason(rec, provider, rules)
    if finding.cause == "first":
        finding = replace(finding, explanation=finding.explanation + (
            f" {why_not[0]} stores nothing of it: {why_not[1]}." if why_not else
            " Its prefix is stored for the requests after it."))
    elif why_not:
        finding = replace(finding, explanation=f"{finding.explanation} {why_not[0]} caches nothing here: {why_not[1]}.")
    return Why(finding.cause, finding.trap, finding.explanation, finding.fix, other,
               divergence(r, o, pos, replay.memo, other))


def uncached_reason(rec: Measured, provider: str, rules: dict) -> tuple[str, str] | None:
    """(provider label, why) when the provider caches nothing of this request whatever came before.

    claude-haiku-4-5, 3,000 tokens -> ('Anthropic', "every breakpoint comes before claude-haiku-4-5's
    minimum cacheable length of 4,096 tokens")
    """
    n, p = rec.prompt_tokens, rules["providers"][provider]
    if provider == "anthropic":
        a = rec.anthropic
        if a.refused:
            return p["label"], f"the API would refuse the request ({a.refused})"
        if a.below_minimum:
            return p["label"], (f"every breakpoint comes before {a.model}'s minimum cacheable length of "
                                f"{a.min_tokens:,} tokens")
        if not a.breakpoints:
            return p["label"], "the request has no cache_control breakpoint"
    elif provider == "openai" and n < p["min_tokens"]:
        return p["label"], f"the prompt is under {p['min_tokens']:,} tokens, the least it caches"
    elif provider == "vllm" and n <= p["block_size"]:
        return p["label"], f"the prompt does not fill one {p['block_size']}-token block past its last token"
    return None


def _expiry_cost(rec: Measured, provider: str, shared_any: int, rules: dict) -> bool:
    """Would the provider have cached more had nothing expired?"""
    if rec.expired_tokens[provider] <= 0:
        return False
    if provider == "openai":
        return openai_cached(shared_any, rules) > rec.cached_tokens["openai"]
    return True


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "unlimited"
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"


def divergence(r: Side, o: Side | None, pos: int, memo: TokenMemo, other_number: int | None) -> Divergence | None:
    """The first divergent token in both requests, with the tokens around it (readable text)."""
    if o is None or pos >= r.n:
        return None
    lo = max(0, pos - CONTEXT_TOKENS)
    text = lambda s, a, b: [memo.token(t) for t in token_ids(s.seq, a, b)]  # noqa: E731
    mine, theirs = token_ids(r.seq, pos, pos + 1), token_ids(o.seq, pos, pos + 1)
    return Divergence(pos, other_number, where(r, r.block_at(pos)), memo.token(mine[0]),
                      memo.token(theirs[0]) if theirs else None, text(r, lo, pos),
                      text(r, pos + 1, pos + 1 + CONTEXT_TOKENS),
                      text(o, pos + 1, pos + 1 + CONTEXT_TOKENS) if theirs else [])
