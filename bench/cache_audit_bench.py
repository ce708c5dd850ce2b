"""Cache-audit benchmark: a synthetic log of 10,000 chat requests of ~3,000 tokens each (a few shared
system prompts, many interleaved conversations resending their history), audited end to end.

Reports: the time of each phase (parse, tokenize, prefix search, Anthropic replay, explanations,
tree); tokenization with the piece memo against encoding every request's text whole (both on the
whole log); and the radix-tree prefix search against the naive all-pairs loop on a subset, both in
one run, with the ratio and the naive loop extrapolated to the whole log by its count of pairs.

Run: .venv/bin/python bench/cache_audit_bench.py [--requests 10000] [--subset 300]
"""
from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import time

from pipeline.prompt_cache import audit as ca
from pipeline.prompt_cache.audit import radix, replay, tokens

WORDS = ("order delivery refund invoice account warranty parcel courier address payment card return label "
         "replacement engineer appointment filter kettle washer dryer oven fridge freezer seal drum pump "
         "hose error code reset manual guarantee receipt voucher discount update schedule window morning "
         "evening weekend driver depot warehouse tracking number customer service team manager").split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def system_prompt(k: int, tokens: int = 2000) -> str:
    """A long stable instruction text (about `tokens` o200k tokens), one per app."""
    rng = random.Random(1000 + k)
    lines = [f"You are assistant number {k} of the support platform. Follow every rule below."]
    while len(" ".join(lines)) < tokens * 5.2:
        lines.append(f"Rule {len(lines)}: " + sentence(rng, rng.randint(12, 24)))
    return "\n".join(lines)


def build_log(n_requests: int, seed: int = 0) -> tuple[str, int]:
    """JSONL of n_requests: conversations of 5 turns over 4 system prompts, interleaved, 0.4 s apart."""
    rng = random.Random(seed)
    systems = [system_prompt(k) for k in range(4)]
    turns, active, entries, t, conv_id = 5, [], [], 0.0, 0
    while len(entries) < n_requests:
        if len(active) < 300 or rng.random() < 0.05:  # keep about 300 conversations going at once
            active.append({"id": conv_id, "messages": [{"role": "system", "content": systems[conv_id % 4]}], "turn": 0})
            conv_id += 1
        conv = rng.choice(active)
        conv["turn"] += 1
        question = " ".join(sentence(rng, 14) for _ in range(rng.randint(5, 12)))
        conv["messages"].append({"role": "user", "content": question})
        entries.append(json.dumps({"ts": round(t, 2), "body": {"model": "gpt-4.1", "messages": conv["messages"]}}))
        answer = " ".join(sentence(rng, 16) for _ in range(rng.randint(14, 26)))
        conv["messages"].append({"role": "assistant", "content": answer})
        if conv["turn"] == turns:
            active.remove(conv)
        t += rng.uniform(0.1, 0.7)
    return "\n".join(entries) + "\n", conv_id


def naive_lcp(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def naive_search(seqs: list[list[int]], times: list[float], ttl: float) -> list[int]:
    """For each request: the longest prefix shared with any earlier live request, comparing every pair."""
    out = []
    for i, a in enumerate(seqs):
        out.append(max((naive_lcp(a, seqs[j]) for j in range(i) if times[j] >= times[i] - ttl), default=0))
    return out


def naive_search_memcmp(seqs: list[bytes], times: list[float], ttl: float) -> list[int]:
    """The same all-pairs loop, each pair compared at memcmp speed (the tree's own compare)."""
    out = []
    for i, a in enumerate(seqs):
        best = 0
        for j in range(i):
            if times[j] >= times[i] - ttl:
                b = seqs[j]
                best = max(best, radix.common_bytes(a, 0, b, 0, min(len(a), len(b))) // 4)
        out.append(best)
    return out


def live_pairs(times: list[float], ttl: float) -> int:
    """Pairs (j < i) with request j sent at most `ttl` seconds before request i (times never decrease)."""
    from bisect import bisect_left

    return sum(i - bisect_left(times, t - ttl, 0, i) for i, t in enumerate(times))


def tree_search(seqs: list[bytes], times: list[float], ttl: float) -> list[int]:
    tree = ca.PrefixTree()
    return [tree.add(s, t, i, (t - ttl,))[0][0] for i, (s, t) in enumerate(zip(seqs, times))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--subset", type=int, default=300, help="requests for the naive all-pairs comparison")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    text, conversations = build_log(args.requests)
    print(f"synthetic log: {args.requests:,} requests from {conversations:,} conversations over 4 system prompts, "
          f"{len(text) / 2**20:.0f} MB of JSONL (built in {time.perf_counter() - t0:.1f} s)")

    t0 = time.perf_counter()
    ca.encoding("o200k_base")  # loading the tokenizer's tables is a one-time cost, timed apart
    print(f"loading o200k_base: {time.perf_counter() - t0:.2f} s (once per process)")

    t0 = time.perf_counter()
    requests = ca.parse_log(text, max_bytes=None)  # over the page's 50 MB limit on purpose
    parse_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    report = ca.audit_requests(requests, "openai")
    audit_s = time.perf_counter() - t0
    costs = ca.bill(report)
    tm = report.timing
    print(f"\nwhole audit of {tm['requests']:,} requests, {tm['tokens'] / 1e6:.1f} M tokens "
          f"({tm['tokens'] / tm['requests']:,.0f} per request):")
    print(f"  parse JSON + normalise       {parse_s:7.2f} s")
    print(f"  tokenize (piece memo)        {tm['tokenize_s']:7.2f} s   {tm['distinct_pieces']:,} distinct pieces "
          f"encoded of {tm['pieces_looked_up']:,} looked up")
    print(f"  prefix search (radix tree)   {tm['prefix_search_s']:7.2f} s   {tm['tree_nodes']:,} nodes")
    print(f"  Anthropic breakpoint replay  {tm['anthropic_s']:7.2f} s")
    print(f"  divergences + causes         {tm['explain_s']:7.2f} s")
    print(f"  prefix-tree rows             {tm['tree_rows_s']:7.2f} s")
    print(f"  audit total (after parse)    {audit_s:7.2f} s   -> parse + audit {parse_s + audit_s:.2f} s")
    print(f"  peak memory (RSS)            {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10:7.0f} MB")
    for p in ca.PROVIDERS:
        t = costs["totals"][p]
        print(f"  {p:10s} hit rate {t['hit_rate']:.1%}, ${t['without_cache']:.2f} -> ${t['with_cache']:.2f}")

    memo = tokens.TokenMemo("o200k_base")
    whole_text = ["".join(b.header + b.text for b in r.blocks) for r in requests]
    t0 = time.perf_counter()
    memo.enc.encode_batch(whole_text)  # the same parallel call the memo uses, on every request's full text
    whole_s = time.perf_counter() - t0
    del whole_text
    print(f"\ntokenizing all {len(requests):,} requests: each request's text whole {whole_s:.2f} s; with the piece "
          f"memo (identical pieces once) {tm['tokenize_s']:.2f} s, as measured above")

    n = min(args.subset, len(requests))
    ttl = ca.load_rules()["providers"]["openai"]["ttl_seconds"]
    times = replay._times(requests[:n])
    memo.fill(t for r in requests[:n] for b in r.blocks for t in (b.header, b.text))
    seqs = [memo.render(r)[0] for r in requests[:n]]
    ids = [tokens.token_ids(s) for s in seqs]
    t0 = time.perf_counter()
    fast = tree_search(seqs, times, ttl)
    tree_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    slow = naive_search(ids, times, ttl)
    naive_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    slow_c = naive_search_memcmp(seqs, times, ttl)
    naive_c_s = time.perf_counter() - t0
    assert fast == slow == slow_c, "the radix tree and the naive loops disagree"
    pairs = live_pairs(times, ttl)
    all_times = replay._times(requests)
    total_live, total_all = live_pairs(all_times, ttl), len(requests) * (len(requests) - 1) // 2
    print(f"\nprefix search on the first {n} requests ({pairs:,} live pairs), same answers from all three:")
    print(f"  radix tree                      {tree_s * 1e3:9.1f} ms")
    print(f"  naive all pairs, Python loop    {naive_s * 1e3:9.1f} ms   ({naive_s / tree_s:,.0f}x the tree)")
    print(f"  naive all pairs, memcmp compare {naive_c_s * 1e3:9.1f} ms   ({naive_c_s / tree_s:,.0f}x the tree)")
    per_pair, per_pair_c = naive_s / pairs, naive_c_s / pairs
    print(f"  extrapolated to all {len(requests):,} requests at the same cost per pair "
          f"(the tree measured {tm['prefix_search_s']:.2f} s for all of it):")
    print(f"    OpenAI's 5-minute TTL: {total_live:,} live pairs -> "
          f"Python loop ~{per_pair * total_live / 60:,.1f} min, "
          f"memcmp ~{per_pair_c * total_live / 60:,.1f} min")
    print(f"    no TTL (vLLM, or the whole log): {total_all:,} pairs -> "
          f"Python loop ~{per_pair * total_all / 60:,.0f} min, "
          f"memcmp ~{per_pair_c * total_all / 60:,.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
