"""`python -m pipeline serving`: this machine's ceilings, the prefill and decode points on the roofline,
the batching sweep, and (--determinism N) temperature 0 alone vs inside a batch of N others."""
from __future__ import annotations

import argparse

from pipeline.cli.arguments import check_model_arg, write_json
from pipeline.core.errors import InputError
from pipeline.costs.sweep import BATCH_SIZES, GPU_BATCH_SIZES, batch_sizes, parse_batch_sizes


NAME = "serving"
HELP = "prefill and decode on the roofline, batching measured"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch-sizes", default=None, help="requests decoded together (default: "
                   f"{','.join(map(str, BATCH_SIZES))} on a CPU, {','.join(map(str, GPU_BATCH_SIZES))} on a GPU)")
    p.add_argument("--steps", type=int, default=8, help="decode steps measured per batch")
    p.add_argument("--repeats", type=int, default=3, help="interleaved repeats of each measurement")
    p.add_argument("--determinism", type=int, default=None, metavar="N",
                   help="also decode one greedy request alone and inside a batch with N others")
    p.add_argument("--refresh-ceilings", action="store_true", help="measure the ceilings again (else cached)")
    p.add_argument("--json", dest="json_file", default=None, help="write everything measured to this file")
    p.add_argument("--model", default=None, help="smollm2-135m (the default), gemma-3-270m, or a local folder")


def _count(field: str, value, lo: int, hi: int) -> int:
    if value is None or not lo <= value <= hi:
        raise InputError(field, f"must be a whole number from {lo} to {hi}, got {value}.")
    return value


def run(args) -> int:
    from pipeline.core.files import check_output_file

    sizes = None if args.batch_sizes is None else parse_batch_sizes(args.batch_sizes)
    _count("steps", args.steps, 2, 1000)
    _count("repeats", args.repeats, 1, 100)
    if args.determinism is not None:
        _count("determinism", args.determinism, 1, 255)
    check_output_file(args.json_file, "json")
    check_model_arg(args.model)
    from pipeline.costs.report import measure_all
    from pipeline.model.loader import load_model, shared_model
    from pipeline.model.registry import resolve

    lm = load_model(args.model) if args.model and resolve(args.model).is_local else shared_model(args.model)
    sizes = sizes or batch_sizes(lm.dims.device)  # to 32 on a CPU, 512 on a GPU
    report = measure_all(lm, sizes, args.steps, args.repeats, args.determinism, args.refresh_ceilings)
    print_report(report)
    if args.json_file:
        write_json(args.json_file, report, "the serving report")
        print(f"\nWrote the report to {args.json_file}")
    return 0


def print_report(r: dict) -> None:
    from pipeline.costs.roofline import FAR_UNDER

    c = r["ceilings"]
    print(f"{r['model']} on {r['device']}")
    print(f"\nCeilings (medians of {c['repeats']}, cached in the cache folder's serving/ceilings.json):")
    for m in c["matmuls"]:
        print(f"  {m['name']:48s} {m['median'] / 1e9:8.2f} GFLOP/s  ({m['low'] / 1e9:.2f}-{m['high'] / 1e9:.2f})")
    cp = c["copy"]
    print(f"  {cp['name']:48s} {cp['median'] / 1e9:8.2f} GB/s     ({cp['low'] / 1e9:.2f}-{cp['high'] / 1e9:.2f})")
    print(f"  balance point: {c['flops_per_s'] / c['bytes_per_s']:.1f} FLOPs per byte")
    print("\nPrefill (one pass, no captures):")
    for p in r["prefill"]:
        print(f"  T={p['tokens']:5d}  {p['seconds'] * 1e3:9.1f} ms  {p['tokens_per_s']:9.0f} tokens/s  "
              f"{p['flops_per_s'] / 1e9:7.2f} GFLOP/s ({p['compute_share']:.0%} of compute)  "
              f"{p['bytes_per_s'] / 1e9:6.2f} GB/s ({p['memory_share']:.0%} of memory)  {p['verdict']}")
    d = r["decode"]
    print(f"\nDecode, batch {d['batch_size']} after {d['past']} positions: {d['flops_per_token'] / 1e6:,.0f} MFLOP and "
          f"{d['bytes_per_token'] / 1e6:,.0f} MB per token; {d['seconds'] * 1e3:.1f} ms a step: "
          f"{d['compute_share']:.0%} of compute, {d['memory_share']:.0%} of memory: {d['verdict']}")
    f = r["fixed_cost"]
    print(f"\nA pass at almost no work ({f['label']}): {f['seconds'] * 1e3:.1f} ms, "
          f"{f['overhead_s'] * 1e3:.1f} ms of it beyond what the ceilings allow (a pass under "
          f"{FAR_UNDER:.0%} of both ceilings is overhead-bound); it runs {f['operations']:,} separate operations: "
          f"{f['overhead_s'] / f['operations'] * 1e6:,.1f} µs of that overhead for each")
    print("\nBatching (greedy, all rows in one pass per step):")
    print("      B   tokens/s   ms/token/user   (range ms)        roofline bound ms")
    for p in r["sweep"]:
        lo, hi = (x * 1e3 for x in p["step_s_range"])
        print(f"  {p['batch_size']:5d} {p['tokens_per_s']:10.1f} {p['ms_per_token_per_user']:15.1f}   "
              f"({lo:.1f}-{hi:.1f}) {p['predicted_step_s'] * 1e3:18.1f}")
    print(f"  the curve bends at B = {r['bend']}" if r["bend"] else "  tokens/s kept growing over these sizes")
    if "determinism" in r:
        t = r["determinism"]
        print(f"\nTemperature 0, alone vs in a batch of {t['batch_size']} (its row padded by {t['padding']}): "
              f"largest logit difference {t['max_abs_logit_diff']:.3g}; "
              + (f"flips at steps {t['flipped_steps']} (the answers part at step {t['parted_at']})"
                 if t["flipped_steps"] else "no chosen token flips"))
        for f in t["flips"]:
            print(f"  step {f['step']}: alone {f['alone_token']} (lead {f['gap_alone']:.3g}), "
                  f"batch {f['batch_token']} (lead {f['gap_batch']:.3g})")
