"""`python -m pipeline temperature-zero`: one greedy request N times through the room's continuous batching,
each run in another batch mix: how many distinct completions, and where they part (pipeline.costs.temperature_zero).
"""
from __future__ import annotations

import argparse
import sys

from pipeline.cli.arguments import check_model_arg, write_json
from pipeline.costs.batched import QUESTIONS

HISTOGRAM_ROWS = 10  # completions printed (the JSON has them all)


NAME = "temperature-zero"
HELP = "one greedy request N times in changing batches: distinct completions counted"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--requests", type=int, default=1000, help="how many times the request runs (N)")
    p.add_argument("--new-tokens", type=int, default=24, help="tokens each run's answer may have")
    p.add_argument("--max-batch", type=int, default=32, help="rows the running batch may hold")
    p.add_argument("--fillers", type=float, default=0.25, dest="filler_share",
                   help="share of arrivals that are other questions, of other lengths (0 to 0.9)")
    p.add_argument("--seed", type=int, default=0, help="the batch mixes' schedule")
    p.add_argument("--question", default=QUESTIONS[0], help="the request asked every time")
    p.add_argument("--progress", action="store_true", help="print the runs done as they end (on stderr)")
    p.add_argument("--json", dest="json_file", default=None, help="write the whole result (every run) to this file")
    p.add_argument("--model", default=None, help="smollm2-135m (the default), gemma-3-270m, or a local folder")
    p.set_defaults(typed_fields={"filler_share": "fillers"})


def run(args) -> int:
    from pipeline.core.errors import InputError
    from pipeline.core.files import check_output_file
    from pipeline.costs.temperature_zero import check_arguments
    from pipeline.stages.request import ChatRequest

    check_arguments(args.requests, args.new_tokens, args.max_batch, args.filler_share, args.seed)
    try:
        ChatRequest.from_question(args.question)  # the request each run makes, checked before the model loads
    except InputError as e:
        raise InputError("question", e.message) from None
    check_output_file(args.json_file, "json")
    check_model_arg(args.model)
    from pipeline.costs.temperature_zero import temperature_zero_steps
    from pipeline.model.loader import load_model, shared_model
    from pipeline.model.registry import resolve

    lm = load_model(args.model) if args.model and resolve(args.model).is_local else shared_model(args.model)
    steps = temperature_zero_steps(lm, args.requests, args.new_tokens, args.max_batch, args.filler_share, args.seed,
                                   args.question)
    result = run_printing(steps, every=1 if args.progress else None)
    print_result(result.to_json(variants=False))
    if args.json_file:
        write_json(args.json_file, result.to_json(), "the result")
        print(f"\nWrote the result to {args.json_file}")
    return 0


def run_printing(steps, every: int | None):
    """Run a long job's chunks to its result, printing its progress on stderr each time `every` more runs are
    done (None: silent)."""
    shown = 0
    while True:
        try:
            p = next(steps)
        except StopIteration as end:
            return end.value
        if every is not None and p.done >= shown + every:
            shown = p.done - p.done % every
            print(p.note, file=sys.stderr, flush=True)


def print_result(r: dict) -> None:
    """The summary of `TemperatureZero.to_json()` (variants not needed)."""
    m = r["mix_range"]
    print(f"\n{r['model']} on {r['device']}: {r['question']!r}, greedy, {r['new_tokens']} new tokens, run "
          f"{r['requests']} times beside {r['fillers']} other requests ({r['steps']} decode steps, "
          f"{r['seconds']:.0f} s; seed {r['seed']})")
    print(f"Batch mixes: {r['distinct_mixes']} different among {r['runs']} runs; decode batches of "
          f"{m['batch_sizes'][0]}-{m['batch_sizes'][1]} rows (at most {r['max_batch']}), the run's row "
          f"{m['rows'][0]}-{m['rows'][1]}, left padding {m['padding'][0]}-{m['padding'][1]} positions, prefilled "
          f"in groups of {m['prefill_groups'][0]}-{m['prefill_groups'][1]}")
    print(f"\nDistinct completions: {r['distinct']} of {r['runs']}")
    for c in r["completions"][:HISTOGRAM_ROWS]:
        where = "most common" if c["parted_at"] is None else f"parts at step {c['parted_at']}"
        print(f"  {c['count']:6d}  ({where})  {c['text']!r}")
    if len(r["completions"]) > HISTOGRAM_ROWS:
        print(f"  ... and {len(r['completions']) - HISTOGRAM_ROWS} more")
    if r["parted_at"]:
        print("Runs by the step where they first part from the most common completion: "
              + ", ".join(f"step {s}: {n}" for s, n in r["parted_at"].items()))
    gaps = [(s, g) for s, g in enumerate(r["reference_gap"]) if g is not None]
    if gaps:
        s, g = min(gaps, key=lambda x: x[1])
        print(f"Narrowest lead of the best token over the second (the reference run): {g:.3g} at step {s}")
    print(f"Largest difference of those two tokens' scores between runs still asking the same thing: "
          f"{r['largest_top2_difference']:.3g}"
          + (f" ({r['missing_scores']} scores not kept)" if r["missing_scores"] else ""))
