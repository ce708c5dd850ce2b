"""Temperature 0 at scale: one greedy request run N times through the room's continuous batching (BatchDecoder),
each run in another batch mix, and the number of distinct completions (Thinking Machines counted 80 distinct of
1,000 on a 235B model served by vLLM, 1,000 tokens each).

  .venv/bin/python bench/temperature_zero_at_scale.py [--requests 1000] [--new-tokens 24] [--max-batch 32]
      [--threads 1] [--question TEXT] [--json out.json] [--model gemma-3-270m]

The same code runs on a GPU (the model's device decides). --threads: torch's CPU threads (on a shared, loaded
machine one thread is faster than two). Prints the summary `python -m pipeline temperature-zero` prints.
"""
from __future__ import annotations

import argparse
import os
import platform
import time

from pipeline.cli.commands.temperature_zero import print_result, run_printing


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--new-tokens", type=int, default=24)
    p.add_argument("--max-batch", type=int, default=32)
    p.add_argument("--fillers", type=float, default=0.25)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--question", default="Are tomatoes fruit?")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", default=None)
    p.add_argument("--model", default=None)
    args = p.parse_args()
    import torch

    from pipeline.cli.arguments import write_json
    from pipeline.costs.temperature_zero import temperature_zero_steps
    from pipeline.model.loader import shared_model

    if args.threads:
        torch.set_num_threads(args.threads)
    lm = shared_model(args.model)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, {platform.node()}, {os.cpu_count()} CPUs, "
          f"load {load:.1f}, torch {torch.__version__} ({torch.get_num_threads()} threads), device {lm.device}")
    steps = temperature_zero_steps(lm, args.requests, args.new_tokens, args.max_batch, args.fillers, args.seed,
                                   args.question)
    result = run_printing(steps, every=100)
    print_result(result.to_json(variants=False))
    print(f"load at the end {os.getloadavg()[0]:.1f}")
    if args.json:
        write_json(args.json, result.to_json(), "the result")


if __name__ == "__main__":
    main()
