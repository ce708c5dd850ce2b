"""Fewer bytes per token: HF fp32 `generate` and our plain path in each weight format, interleaved.

  .venv/bin/python bench/weight_formats_bench.py [--model smollm2-135m|gemma-3-270m] [--tokens 32] [--repeats 3]

Each round runs HF fp32 generate, then the plain path in fp32, bf16 and int8, on the same greedy request;
each figure is the median of --repeats rounds with its range. Printed per format: weight bytes read per
token, TPOT, that read's share of this machine's copy bandwidth (measured in the same run: the bytes a
step reads / TPOT, against the copy's read + write per second), the resident memory the converted copy
added, and the quality against fp32 (KL, top-1 agreement, greedy answer); then the 8-bit KV cache's
attention error on the default prompt. A ratio against HF is given only where the ranges do not overlap.
"""
from __future__ import annotations

import argparse
import sys

from decode_speed_bench import copy_bandwidth, hf_tpot  # bench/ is this script's folder

from pipeline.core.timing import compare_runs
from pipeline.faster.formats import greedy_answer, prompt_ids, quality_rows
from pipeline.model.loader import shared_model
from pipeline.model.weight_formats import WEIGHT_FORMATS

QUESTION = "Are tomatoes fruit?"


def resident_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    models, added = {}, {}
    for w in WEIGHT_FORMATS:
        before = resident_bytes()
        models[w] = shared_model(args.model, weights=w)
        added[w] = resident_bytes() - before
    fp32 = models["fp32"]
    ids = prompt_ids(fp32, QUESTION)
    runs = {name: [] for name in ("HF fp32 generate", *WEIGHT_FORMATS)}
    for _ in range(args.repeats):
        runs["HF fp32 generate"].append(hf_tpot(fp32, ids, args.tokens)[0])
        for w, lm in models.items():
            runs[w].append(greedy_answer(lm, QUESTION, args.tokens)[2])
    bandwidth = copy_bandwidth()
    rows = quality_rows(models, QUESTION, max_new_tokens=args.tokens)
    hf = runs["HF fp32 generate"]
    print(f"{fp32.name}; {args.repeats} interleaved rounds of {args.tokens} tokens; copy bandwidth "
          f"{bandwidth / 1e9:.1f} GB/s (read + write)")
    print(f"{'':18s} {'read/token':>11s} {'TPOT ms':>8s} {'range':>13s} {'vs HF fp32':>22s} {'bandwidth':>9s} "
          f"{'RSS added':>10s} {'KL mean':>9s} {'KL max':>8s} {'top-1':>6s}  greedy")
    for name, xs in runs.items():
        c = compare_runs(xs, hf)
        vs = "—" if name.startswith("HF") else (f"{c.ratio:.2f}x" if c.separated else "ranges overlap")
        line = f"{name:18s}"
        if name in rows:
            r = rows[name]
            share = r.bytes_per_token / c.a_median / bandwidth
            greedy = "= fp32" if r.same_greedy else f"leaves fp32 at token {r.first_difference}"
            line += (f" {r.bytes_per_token / 2**20:8.0f} MiB {c.a_median * 1e3:8.1f} {c.a_range[0] * 1e3:6.1f}-"
                     f"{c.a_range[1] * 1e3:<6.1f} {vs:>22s} {share:9.0%} {added[name] / 2**20:6.0f} MiB "
                     f"{r.kl_mean:9.2e} {r.kl_max:8.2e} {r.top1_agreement:6.1%}  {greedy}")
        else:
            line += f" {'':11s} {c.a_median * 1e3:8.1f} {c.a_range[0] * 1e3:6.1f}-{c.a_range[1] * 1e3:<6.1f}"
        print(line)
    print("(RSS added: the fp32 line is the model's load; each other line its converted copy.) "
          "Held: " + ", ".join(f"{w} {r.parameter_bytes / 1e6:,.0f} MB" for w, r in rows.items()))
    for w, r in rows.items():
        print(f"  {w} greedy: {r.greedy_text[:100]!r}")
    kv_report(fp32)
    return 0


def kv_report(lm) -> None:
    from pipeline.model.kv_int8 import attention_error
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest, GenerationOptions

    trace = run_trace(ChatRequest.from_question(QUESTION, options=GenerationOptions(max_new_tokens=1)), lm)
    p = trace.prefill
    e = attention_error(p.q_rot, p.k_rot, p.v, trace.dims)
    print(f"8-bit KV cache, default prompt ({len(trace.ids)} positions): {e.bytes_fp32:,} B fp32, {e.bytes_bf16:,} B "
          f"bf16, {e.bytes_int8:,} B int8 + scales; attention output error {max(e.relative):.3%} (worst layer), "
          f"{sum(e.relative) / len(e.relative):.3%} (mean); stored K/V error {e.kv_rel:.3%}")


if __name__ == "__main__":
    sys.exit(main())
