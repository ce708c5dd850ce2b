"""The audit: requests replayed in order through the radix tree and Anthropic's simulated cache, each
measured under every provider's rules, then explained."""
from __future__ import annotations

import json
import time

from pipeline.core.errors import InputError
from pipeline.prompt_cache.audit import notes
from pipeline.prompt_cache.audit.anthropic import AnthropicCache
from pipeline.prompt_cache.audit.explain import Replay, explain
from pipeline.prompt_cache.audit.log import MAX_LOG_BYTES, LogRequest, parse_log
from pipeline.prompt_cache.audit.radix import INF, Cut, PrefixTree, tree_rows
from pipeline.prompt_cache.audit.records import AnthropicResult, AuditReport, Measured, RequestRecord
from pipeline.prompt_cache.audit.rules import PROVIDERS, load_rules, openai_cached, request_ttl, ttl_of, vllm_cached
from pipeline.prompt_cache.audit.tokens import TokenMemo


def audit_requests(requests: list[LogRequest], provider: str = "openai", rules: dict | None = None,
                   tokenizer: str | None = None, breakpoints: str = "auto", tree_nodes: int = 300) -> AuditReport:
    """Replay the requests in order under every provider's rules.

    provider: whose TTL defines "alive" for `shared_prefix_tokens` and the "expired" cause.
    breakpoints: "auto" adds Anthropic's two recommended breakpoints to requests sent without any;
    "as-sent" uses only the cache_control markers in the log.
    """
    if provider not in PROVIDERS:
        raise InputError("provider", f"choose one of {', '.join(PROVIDERS)}, got {provider!r}.")
    if not requests:
        raise InputError("log", "there is no request to audit.")
    rules = rules or load_rules()
    clock = {"start": time.perf_counter()}
    memo = TokenMemo(tokenizer or rules["tokenizer"])
    memo.fill(t for r in requests for b in r.blocks for t in (b.header, b.text))
    rendered = [memo.render(r) for r in requests]
    clock["tokenize"] = time.perf_counter()

    times = _times(requests)
    ttls = {p: ttl_of(p, rules, requests) for p in PROVIDERS}
    order = PROVIDERS + ("any",)
    tree, anthropic = PrefixTree(), AnthropicCache(rules)
    measured, cuts_all = [], []
    search_s = anth_s = 0.0
    for i, (r, (seq, starts)) in enumerate(zip(requests, rendered)):
        t = times[i]
        alive = [request_ttl(p, r, ttls, rules) for p in order]
        floors = tuple(-INF if ttl is None else t - ttl for ttl in alive)
        t0 = time.perf_counter()
        cuts = dict(zip(order, tree.add(seq, t, i, floors)))
        t1 = time.perf_counter()
        anth = anthropic.serve(r, seq, starts, t, breakpoints)
        anth_s += time.perf_counter() - t1
        search_s += t1 - t0
        cuts_all.append(cuts)
        measured.append(measure(r, seq, starts, t, cuts, anth, rules, provider))
    clock["replay"] = time.perf_counter()
    replay = Replay(requests, rendered, memo, times, ttls, provider, rules)
    records = [RequestRecord.of(m, explain(replay, i, m, cuts_all[i]["any"])) for i, m in enumerate(measured)]
    clock["explain"] = time.perf_counter()
    rows = tree_rows(tree, memo, tree_nodes)
    clock["tree"] = time.perf_counter()
    timing = {"tokenize_s": clock["tokenize"] - clock["start"], "prefix_search_s": search_s,
              "anthropic_s": anth_s, "explain_s": clock["explain"] - clock["replay"],
              "tree_rows_s": clock["tree"] - clock["explain"], "total_s": clock["tree"] - clock["start"],
              "requests": len(requests), "tokens": sum(len(s) // 4 for s, _ in rendered),
              "distinct_pieces": len(memo.ids), "pieces_looked_up": memo.pieces_seen, "tree_nodes": tree.n_nodes}
    return AuditReport(provider, memo.name, records, rows, notes.notes(requests, records, memo.name, rules),
                       notes.rules_used(rules), timing, notes.warnings(records, rules))


def audit_log(text: str, provider: str = "openai", rules: dict | None = None, max_bytes: int | None = MAX_LOG_BYTES,
              **kwargs) -> AuditReport:
    """Parse a pasted or uploaded log and audit it (InputError for bad input, naming request and line)."""
    return audit_requests(parse_log(text, max_bytes), provider, rules, **kwargs)


def _times(requests: list[LogRequest]) -> list[float]:
    """Seconds since the first request; a request without a timestamp was sent with the one before it."""
    known = [r.ts for r in requests if r.ts is not None]
    last = known[0] if known else 0.0
    out = []
    for r in requests:
        last = r.ts if r.ts is not None else last
        out.append(last - (known[0] if known else 0.0))
    return out


def measure(r: LogRequest, seq: bytes, starts: list[int], t: float, cuts: dict[str, Cut], anth: AnthropicResult,
            rules: dict, provider: str) -> Measured:
    n = len(seq) // 4
    shared = {p: cuts[p].tokens for p in PROVIDERS}
    cached = {"openai": openai_cached(shared["openai"], rules), "anthropic": anth.cache_read_input_tokens,
              "vllm": vllm_cached(shared["vllm"], n, rules)}
    ends = starts[1:] + [n]
    closest = cuts["any"]
    return Measured(
        index=r.number, line=r.line, shape=r.shape, model=r.model, time_s=t, label=_label(r), prompt_tokens=n,
        output_tokens=r.output_tokens, shared_prefix_tokens=shared[provider], shared_prefix_by_provider=shared,
        first_divergent_index=closest.tokens if closest.tokens < n and closest.other >= 0 else None,
        expired_tokens={p: closest.tokens - shared[p] for p in PROVIDERS}, cached_tokens=cached, anthropic=anth,
        blocks=[[_block_label(r, i), s, e] for i, (s, e) in enumerate(zip(starts, ends))])


def _label(r: LogRequest) -> str:
    """The last user message's start, to tell requests apart in a list; a tool result by its content.

    '{"type": "tool_result", "content": "3 passed"}' -> 'tool_result: 3 passed'
    """
    users = [b for b in r.blocks if b.section == "messages" and b.role == "user" and b.text]
    text = (users[-1] if users else r.blocks[-1]).text
    if text.startswith("{") and len(text) < 20_000:
        try:
            part = json.loads(text)
        except (ValueError, RecursionError):
            part = None
        if isinstance(part, dict) and isinstance(part.get("content", part.get("text")), str):
            text = f"{part.get('type', 'part')}: {part.get('content', part.get('text'))}"
    return " ".join(text[:400].split())[:90]


def _block_label(r: LogRequest, i: int) -> str:
    b = r.blocks[i]
    return "tools" if b.section == "tools" else "system" if b.section == "system" else f"{b.role} {b.message + 1}"
