"""Command line: `python -m pipeline trace|tokens|cache-demo ...`."""
from __future__ import annotations

import argparse
import json
import sys

from .errors import InputError
from .options import ChatRequest, GenerationOptions


def _trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("question")
    p.add_argument("--system", default=None, help="system prompt (the template adds a default one if omitted)")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--json", dest="json_file", default=None, help="write the whole trace to this file")
    p.add_argument("--tensors", action="store_true", help="include the large tensors in the JSON")
    p.add_argument("--model", default=None, help="a local Hugging Face causal-LM folder instead of SmolLM2")


def cmd_trace(args) -> int:
    from .loader import shared_model
    from .report import print_trace
    from .trace import run_trace

    options = GenerationOptions(args.max_new_tokens, args.temperature, args.top_k, args.top_p, args.min_p,
                                args.seed, tuple(args.stop))
    request = ChatRequest.from_question(args.question, system=args.system, options=options)
    request.validate()
    trace = run_trace(request, shared_model(args.model))
    print_trace(trace)
    if args.json_file:
        with open(args.json_file, "w", encoding="utf-8") as f:
            json.dump(trace.to_json(include_tensors=args.tensors), f, ensure_ascii=False, indent=1)
        print(f"\nWrote the trace to {args.json_file}")
    return 0


def cmd_tokens(args) -> int:
    from .compare_tokenizers import compare
    from .loader import shared_model

    if not args.text:
        raise InputError("text", "give some text to tokenize.")
    for r in compare(args.text, shared_model().tokenizer):
        ratio = len(args.text) / r.count if r.count else 0.0
        print(f"{r.label:32s} {r.count:5d} tokens  {ratio:5.2f} chars/token")
        print("    " + " | ".join(r.pieces))
        print("    " + str(r.ids))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _trace_args(sub.add_parser("trace", help="follow one chat request through every stage"))
    t = sub.add_parser("tokens", help="compare tokenizers on some text")
    t.add_argument("text")
    try:
        from .cache_demo import add_cache_demo_parser

        add_cache_demo_parser(sub)
    except ImportError:
        pass
    args = parser.parse_args(argv)
    try:
        return {"trace": cmd_trace, "tokens": cmd_tokens}.get(args.command, getattr(args, "func", None))(args)
    except (InputError, ValueError) as e:  # bad input or a --model folder that is not a model
        print(f"error: {e}", file=sys.stderr)
        return 2
