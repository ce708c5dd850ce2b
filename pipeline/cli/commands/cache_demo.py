"""`python -m pipeline cache-demo [--scenario KEY] [--block-size N] [--no-cold]`: the prompt-caching scenarios
(pipeline.prompt_cache.scenarios) played on the model: per request its blocks hit, missed and not cacheable, the
tokens reused, and TTFT warm and cold."""
from __future__ import annotations

import argparse

from pipeline.core.checks import integer, shown
from pipeline.core.errors import InputError

NAME = "cache-demo"
HELP = "play the prompt-caching scenarios and print cache hits"
MAX_BLOCK_SIZE = 4_096  # tokens; the scenarios' prompts are a few hundred tokens, so a block this big caches nothing


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", action="append", default=[], help="scenario key (repeatable; default: all)")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--no-cold", action="store_true", help="skip the cold re-run of each request")


def run(args) -> int:
    from pipeline.prompt_cache.scenarios import scenarios

    known = scenarios()
    keys = args.scenario or list(known)
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise InputError("scenario", f"unknown scenario {shown(unknown[0])}; choose from {', '.join(known)}.")
    integer("block_size", args.block_size, lo=1, hi=MAX_BLOCK_SIZE)
    from pipeline.model.loader import shared_model
    from pipeline.prompt_cache.playback import play_scenario

    lm = shared_model()
    for key in keys:
        s = known[key]
        print(f"\n== {s.title} [{s.kind}] ==\n   {s.lesson}")
        print(f"   {'request':28s} {'tokens':>6s} {'hit':>4s} {'miss':>4s} {'part':>4s} {'reused':>6s} "
              f"{'TTFT ms':>8s} {'cold ms':>8s}")
        for row in play_scenario(lm, s, args.block_size, measure_cold=not args.no_cold):
            st = row["stats"]
            cold = f"{row['ttft_cold_s'] * 1e3:8.1f}" if row["ttft_cold_s"] is not None else f"{'-':>8s}"
            print(f"   {row['label'][:28]:28s} {st['n_tokens']:6d} {st['blocks_hit']:4d} {st['blocks_missed']:4d} "
                  f"{st['blocks_not_cacheable']:4d} {st['tokens_reused']:6d} {st['ttft_s'] * 1e3:8.1f} {cold}")
            print(f"      {row['reason']}")
    return 0
