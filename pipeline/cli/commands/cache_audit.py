"""`python -m pipeline cache-audit LOG [--provider P] [--json OUT]`: a request log audited under OpenAI's,
Anthropic's and vLLM's prompt-cache rules (pipeline.prompt_cache.audit): per request the shared prefix, what each
provider caches and why not, then hit rates and cost. Never imports torch."""
from __future__ import annotations

import argparse

from pipeline.cli.arguments import write_json
from pipeline.core.files import check_input_file, check_output_file

NAME = "cache-audit"
HELP = "audit a JSON/JSONL request log for prompt-cache hits and cost"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="JSON array or JSONL of request bodies (or {\"ts\": ..., \"body\": {...}})")
    p.add_argument("--provider", choices=("openai", "anthropic", "vllm"), default="openai",
                   help="whose cache lifetime decides the shared prefix and 'expired' (all three are counted)")
    p.add_argument("--json", dest="json_file", default=None, help="write the whole audit to this file")
    p.add_argument("--prefill-tps", type=float, default=None,
                   help="the provider's prefill speed, tokens/s, for time saved (default: each provider's "
                        "stand-in figure in assets/cache_rules.json)")
    p.add_argument("--output-tokens", type=int, default=200, help="output tokens per request the log omits")
    p.add_argument("--breakpoints", choices=("auto", "as-sent"), default="auto",
                   help="Anthropic: add the recommended breakpoints to requests sent without cache_control")


def run(args) -> int:
    """Audit a request log under OpenAI's, Anthropic's and vLLM's prompt-cache rules (no torch needed)."""
    check_output_file(args.json_file, "json")
    check_input_file(args.file, "file")  # a device (/dev/zero) or a FIFO is refused before it is opened
    from pipeline.prompt_cache import audit as ca

    text = ca.read_log_file(args.file)
    report = ca.audit_log(text, provider=args.provider, breakpoints=args.breakpoints)
    costs = ca.bill(report, prefill_tps=args.prefill_tps, output_tokens=args.output_tokens)
    print(f"{len(report.requests)} requests; prefix and divergence for {args.provider}; tokens: {report.tokenizer}")
    print(f"{'#':>4s} {'tokens':>6s} {'shared':>6s} {'openai':>6s} {'anthr.':>6s} {'write':>6s} {'vllm':>6s} "
          f"{'diverge':>7s}  cause / trap")
    for rec in report.requests:
        c = rec.cached_tokens
        div = "-" if rec.first_divergent_index is None else str(rec.first_divergent_index)
        print(f"{rec.index:4d} {rec.prompt_tokens:6d} {rec.shared_prefix_tokens:6d} {c['openai']:6d} "
              f"{c['anthropic']:6d} {rec.anthropic.cache_creation_input_tokens:6d} {c['vllm']:6d} {div:>7s}  "
              + (f"TRAP: {ca.TRAPS[rec.trap][0]}" if rec.trap else ca.cause_words(rec.cause)))
    print(f"\n{'provider':10s} {'hit rate':>8s} {'cached':>10s} {'no cache $':>11s} {'cached $':>10s} {'saved $':>9s} "
          f"{'prefill saved':>13s}")
    for p, t in costs["totals"].items():
        print(f"{p:10s} {t['hit_rate']:8.1%} {t['cached_tokens']:10,d} {t['without_cache']:11.4f} "
              f"{t['with_cache']:10.4f} {t['saved']:9.4f} {t['latency_saved_s']:12.1f}s")
    traps = sorted({r.trap for r in report.requests if r.trap})
    for trap in traps:
        print(f"\nTrap: {ca.TRAPS[trap][0]} ({sum(r.trap == trap for r in report.requests)} requests). "
              f"Fix: {ca.TRAPS[trap][1]}")
    for warning in report.warnings:
        print(f"warning: {warning}")
    for note in report.notes:
        print(f"note: {note}")
    if args.json_file:
        write_json(args.json_file, ca.report_json(report, costs), "the audit")
        print(f"\nWrote the audit to {args.json_file}")
    return 0
