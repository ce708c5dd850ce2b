"""`python -m pipeline explain "QUESTION" [--step S] [--target TOKEN_ID] [--minus TOKEN_ID] [--json OUT]`:
why the model scored a token as it did (pipeline/attribution/). `--attends LAYER.HEAD [--query POSITION]`: why
that head attends where it does (pipeline/attribution/qk.py), in the document's `qk`."""
from __future__ import annotations

import argparse

from pipeline.cli.arguments import check_model_arg, request_from_args, write_json
from pipeline.cli.parser import REQUEST_FIELDS
from pipeline.core.checks import integer, number
from pipeline.core.errors import InputError


NAME = "explain"
HELP = "why the model chose a token: logit attribution, routes, inputs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("question")
    p.add_argument("--step", type=int, default=0, help="decode step to explain (0: the first answer token)")
    p.add_argument("--target", type=int, default=None, help="token id to explain (default: the one chosen)")
    p.add_argument("--minus", type=int, default=None, help="explain the logit difference target - this token")
    p.add_argument("--threshold", type=float, default=0.04, help="contribution graph: smallest share drawn")
    p.add_argument("--inputs", action="store_true", help="also gradient x input and integrated gradients")
    p.add_argument("--attends", default=None, metavar="LAYER.HEAD",
                   help="also split this head's attention scores into query part x key part terms")
    p.add_argument("--query", type=int, default=None, help="--attends: the query position (default: the last)")
    p.add_argument("--system", default=None)
    p.add_argument("--model", default=None, help="smollm2-135m (the default), gemma-3-270m, or a local folder")
    p.add_argument("--plain", action="store_true", help="the question as plain text, no chat format")
    p.add_argument("--json", dest="json_file", default=None, help="write the explanation to this file")
    p.set_defaults(typed_fields=REQUEST_FIELDS)


def run(args) -> int:
    from pipeline.core.files import check_output_file
    from pipeline.stages.request import MAX_NEW_TOKENS, MAX_TOKEN_ID, GenerationOptions

    integer("step", args.step, lo=0, hi=MAX_NEW_TOKENS - 1)  # the run decodes step + 1 tokens
    for name in ("target", "minus"):  # checked against the vocabulary once the model is loaded
        if getattr(args, name) is not None:
            integer(name, getattr(args, name), lo=0, hi=MAX_TOKEN_ID)
    if not 0 < number("threshold", args.threshold) < 1:
        raise InputError("threshold", f"must be between 0 and 1, got {args.threshold}.")
    attends = _attends(args)
    request = request_from_args(args, GenerationOptions(max_new_tokens=args.step + 1))
    check_output_file(args.json_file, "json")
    check_model_arg(args.model)
    from pipeline.attribution.explain import explain
    from pipeline.model.loader import load_model, shared_model
    from pipeline.model.registry import resolve
    from pipeline.run.trace import run_trace

    lm = load_model(args.model) if args.model and resolve(args.model).is_local else shared_model(args.model)
    trace = run_trace(request, lm)
    if args.step >= len(trace.generated_token_ids):
        raise InputError("step", f"the answer ended after {len(trace.generated_token_ids)} tokens; "
                                 "give a step below that.")
    doc = explain(lm, trace.ids, trace.generated_token_ids, args.step, args.target, args.minus, args.threshold,
                  inputs=args.inputs, moving=[t.index for t in trace.tokens if t.role == "user"] or None,
                  attends=attends, query=args.query)
    what = repr(doc["target_text"]) + (f" minus {doc['minus_text']!r}" if args.minus is not None else "")
    print(f"Step {args.step} ({doc['positions']} positions): logit of {what} (id {doc['target_id']}) "
          f"= {doc['logit']:.3f}")
    if doc["left_out"]:
        print(f"  read on the first token and the last {doc['positions'] - 1}: {doc['left_out']} positions left out")
    print(f"  embedding {doc['embedding']:+.3f}; parts sum to {doc['sum_of_parts']:.3f} ({doc['note']})")
    print(f"  {'layer':>5s} {'attention':>10s} {'mlp':>10s}")
    for row in doc["layers"]:
        print(f"  {row['layer']:5d} {row['attention']:+10.3f} {row['mlp']:+10.3f}")
    for h in doc["top_heads"]:
        promotes = ", ".join(map(repr, h["promotes"]))
        print(f"  head {h['layer']}.{h['head']}: {h['contribution']:+.3f}, promotes {promotes}")
    print(f"  contribution graph: {len(doc['edges'])} edges above {args.threshold}"
          + (" (some layers capped to their strongest positions)" if doc["graph"]["capped"] else ""))
    if args.inputs:
        ig = doc["inputs"]
        print(f"  integrated gradients: sum {sum(ig['integrated_gradients']):+.3f} vs log-prob difference "
              f"{ig['log_prob'] - ig['baseline_log_prob']:+.3f} (gap {ig['completeness_gap']:.1%})")
    if attends is not None:
        _print_qk(doc)
    if args.json_file:
        write_json(args.json_file, doc, "the explanation")
        print(f"\nWrote the explanation to {args.json_file}")
    return 0


def _attends(args) -> tuple[int, int] | None:
    """--attends as (layer, head), its form checked before the model loads (the ranges once it has)."""
    from pipeline.attribution.qk import parse_attends

    if args.attends is None:
        if args.query is not None:
            raise InputError("query", "only goes with --attends LAYER.HEAD.")
        return None
    if args.query is not None:
        integer("query", args.query, lo=0)
    return parse_attends(args.attends)


def _print_qk(doc: dict) -> None:
    qk = doc["qk"]
    print(f"  head {qk['layer']}.{qk['head']} at query position {qk['query_position']}: its top keys")
    for line in qk["said"]:
        print(f"    {line}")
