"""Patching the default question: before (real activation patching of every layer x position of the stream, as the
page did) and after (attribution patching of every head and MLP, then real patching of the top ones), interleaved.

  .venv/bin/python bench/patching_bench.py [--model smollm2-135m] [--repeat 3] [--top 12]

Each round runs both, one after the other (the machine is shared: interleaving spreads its load over both); prints
each run, then the medians with the range, and the agreement of the estimates with real patching on the top parts.
"""
from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--question", default="Are tomatoes fruit?")
    ap.add_argument("--corrupted", default="Are carrots fruit?")
    args = ap.parse_args()
    from pipeline.attribution.component_patching import estimate_and_check
    from pipeline.attribution.interventions import patch_residual
    from pipeline.model.loader import shared_model
    from pipeline.stages.request import ChatRequest
    from pipeline.stages.tokens import tokenize_request

    lm = shared_model(args.model)
    clean, bad = (tokenize_request(lm.tokenizer, ChatRequest.from_question(q)).ids
                  for q in (args.question, args.corrupted))
    positions = list(range(max(0, len(clean) - 48), len(clean)))  # the page's full map: the last 48 positions
    print(f"{lm.name}: {len(clean)} tokens, L={lm.dims.L} H={lm.dims.H}; seconds per run")
    times: dict[str, list[float]] = {"before": [], "after": []}
    result = None
    for r in range(args.repeat):
        t = time.perf_counter()
        patch_residual(lm, clean, bad, positions)
        times["before"].append(time.perf_counter() - t)
        t = time.perf_counter()
        result = estimate_and_check(lm, clean, bad, top=args.top)
        times["after"].append(time.perf_counter() - t)
        print(f"round {r + 1}: before {times['before'][-1]:6.1f}  after {times['after'][-1]:5.2f}", flush=True)
    for name, ts in times.items():
        ts = sorted(ts)
        what = ("real patching of every layer x position" if name == "before" else
                f"attribution patching + real patching of the top {args.top}")
        print(f"{name:6s} median {ts[len(ts) // 2]:6.2f} s [{ts[0]:.2f}-{ts[-1]:.2f}]  ({what})")
    rho, overlap = result.agreement()
    print(f"agreement on the {len(result.checked)} parts patched for real: Spearman {rho:.2f}, "
          f"{overlap} of the top 5 shared")


if __name__ == "__main__":
    main()
