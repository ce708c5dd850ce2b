"""Many answers at once: N samples of one request in one batched run against one sample on its own.

  .venv/bin/python bench/branching_bench.py [--samples 8] [--temperature 1] [--new-tokens 32] [--repeats 5]
                                             [--model smollm2-135m] [--device cpu|cuda]

Interleaved and repeated:
  batched  - `draw_samples`: the prompt prefilled once, its KV cache copied per sample, the N answers decoded
             together (one forward pass per step for all), sample i seeded --seed + i;
  one      - `run_trace` of the same request with seed --seed: one sample, as a single `trace` run.
Every sample is compared with a single run with its own seed once, after the timing: equal, or the step where it
parts (the batch's scores differ from a single pass's by rounding, ~1e-5 on a CPU, which moves a draw only when it
falls that close to a boundary between two tokens). Figures: medians with their ranges; the ratio batched / one is
printed (target: at most 2x for 8 samples at T = 1), with pipeline/core/timing.py's verdict on whether the ranges
separate. The comparison per position (the Jensen-Shannon divergences) is timed apart: it is not the draw.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from pipeline.core.timing import interleave
from pipeline.model.loader import shared_model
from pipeline.run.samples import draw_samples
from pipeline.run.trace import run_trace
from pipeline.stages.request import ChatRequest, GenerationOptions

QUESTION = "Write two sentences about why tomatoes are called fruit."


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default=None)
    ap.add_argument("--device", default=None, help="cuda to put the model on the GPU (default: where it loads)")
    args = ap.parse_args()
    lm = shared_model(args.model)
    if args.device:
        import torch

        lm.model.to(torch.device(args.device))
        lm.device = torch.device(args.device)
    options = GenerationOptions(max_new_tokens=args.new_tokens, temperature=args.temperature, seed=args.seed)
    request = ChatRequest.from_question(QUESTION, options=options)
    temperatures = [args.temperature] * args.samples
    run_trace(request, lm), draw_samples(request, lm, temperatures, args.seed)  # warm both paths once
    batched, single = [], []

    def many():
        batched.append(draw_samples(request, lm, temperatures, args.seed))
        return batched[-1].draw_s

    def one():
        single.append(run_trace(request, lm))
        return single[-1].timings.total_s

    cmp = interleave(many, one, args.repeats)
    last = batched[-1]
    parted = []  # (sample, step) where a sample chose otherwise than the single run with its seed
    for i, sample in enumerate(last.samples):
        alone = run_trace(replace(request, options=replace(options, seed=args.seed + i)), lm).generated_token_ids
        if sample.generated_token_ids != alone:
            mine = sample.generated_token_ids
            first = next((j for j, (x, y) in enumerate(zip(mine, alone)) if x != y), min(len(mine), len(alone)))
            parted.append((i, first))
    lengths = [len(s.generated_token_ids) for s in last.samples]
    compare = sorted(b.compare_s for b in batched)
    print(f"model {lm.dims.name} on {lm.device}; prompt {len(last.prompt_ids)} tokens; {args.samples} samples at "
          f"T = {args.temperature:g}, up to {args.new_tokens} new tokens (lengths {lengths}; the one sample: "
          f"{len(single[-1].generated_token_ids)})")
    print(f"  samples equal to a single run with their seed: {args.samples - len(parted)} of {args.samples}"
          + "".join(f"; sample {i} parts at step {j} (a draw that fell within the batch's rounding of a boundary "
                    "between two tokens)" for i, j in parted))
    print(f"  {args.samples} samples, one batched run {cmp.a_median * 1e3:8,.0f} ms "
          f"(range {cmp.a_range[0] * 1e3:,.0f}-{cmp.a_range[1] * 1e3:,.0f})")
    print(f"  one sample, a single run     {cmp.b_median * 1e3:8,.0f} ms "
          f"(range {cmp.b_range[0] * 1e3:,.0f}-{cmp.b_range[1] * 1e3:,.0f})")
    print(f"  ratio batched / one: {cmp.ratio:.2f}x (target <= 2x: {'met' if cmp.ratio <= 2 else 'NOT met'}); "
          f"{cmp.verdict(f'{args.samples} samples', 'one sample')}")
    print(f"  the comparison per position after the draw: median {compare[len(compare) // 2] * 1e3:,.0f} ms")
    print(f"  disagreeing positions: {sum(p.disagree for p in last.positions)} of {len(last.positions)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
