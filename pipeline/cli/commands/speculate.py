"""`python -m pipeline speculate QUESTION [--drafts K]`: the request decoded greedily with prompt-lookup drafts
(pipeline.faster.speculative) beside plain greedy decoding: each verify pass's drafts accepted (+) and rejected (-), the
acceptance rate, and TPOT both ways, interleaved (medians and ranges)."""
from __future__ import annotations

import argparse

from pipeline.cli.arguments import check_model_arg, request_from_args
from pipeline.cli.parser import REQUEST_FIELDS
from pipeline.core.checks import integer
from pipeline.stages.request import GenerationOptions


NAME = "speculate"
HELP = "speculative decoding (drafts from the prompt) against plain greedy: acceptance and speed"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("question")
    p.add_argument("--drafts", type=int, default=8, help="draft tokens checked per pass (1-16)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3, help="timed runs each way, interleaved (1-10)")
    p.add_argument("--system", default=None)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--model", default=None, help="smollm2-135m (the default), gemma-3-270m, or a model folder")
    p.add_argument("--plain", action="store_true", help="plain-text completion: no chat format")
    p.set_defaults(typed_fields=REQUEST_FIELDS)


def run(args) -> int:
    from pipeline.faster.speculative.rounds import check_drafts

    check_drafts(args.drafts, field="drafts")
    integer("repeats", args.repeats, lo=1, hi=10)
    request = request_from_args(args, GenerationOptions(max_new_tokens=args.max_new_tokens, stop=tuple(args.stop)))
    check_model_arg(args.model)
    from pipeline.faster.speculative.measure import measure
    from pipeline.model.loader import load_model, shared_model
    from pipeline.model.registry import resolve

    lm = load_model(args.model) if args.model and resolve(args.model).is_local else shared_model(args.model)
    run = measure(lm, request, args.drafts, args.repeats)
    text = run.token_texts
    print(f"Answer ({len(run.generated)} tokens, finish reason {run.finish_reason}):\n{run.text}\n")
    print("Verify passes (the token fed, then its drafts: + accepted, - rejected):")
    for r in run.rounds:
        if r.drafts:
            marks = [f"+{text[d]!r}" for d in r.drafts[:r.accepted]] + [f"-{text[d]!r}" for d in r.rejected]
            print(f"  step {r.step:3d}: {text[r.token]!r} | " + " ".join(marks))
    rate = "nothing drafted" if run.acceptance is None else f"{run.accepted}/{run.drafted} = {run.acceptance:.0%}"
    print(f"\nAcceptance: {rate}; {run.passes} passes for {len(run.generated) - 1} tokens fed "
          f"({run.tokens_per_pass:.2f} per pass; plain decoding: 1)")
    print(f"Same tokens as plain greedy decoding: {'yes' if run.same_tokens else 'NO'}")
    t = run.timing
    print(f"TPOT speculative {t.a_median * 1e3:.1f} ms ({t.a_range[0] * 1e3:.1f}-{t.a_range[1] * 1e3:.1f}), "
          f"plain {t.b_median * 1e3:.1f} ms ({t.b_range[0] * 1e3:.1f}-{t.b_range[1] * 1e3:.1f}): "
          f"{t.verdict('speculative', 'plain')}")
    return 0
