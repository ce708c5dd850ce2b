"""Command line: `python -m pipeline trace|tokens|cache-demo ...`.

Everything a user typed is checked before torch is imported or the model is loaded, so bad input
is refused at once with exit code 2 and a message naming the field.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import fields

from ..errors import InputError
from ..stages.request import ChatRequest, GenerationOptions, check_text

DEFAULTS = GenerationOptions()


def _trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("question")
    p.add_argument("--system", default=None, help="system prompt (the template adds a default one if omitted)")
    p.add_argument("--max-new-tokens", type=int, default=DEFAULTS.max_new_tokens)
    p.add_argument("--temperature", type=float, default=DEFAULTS.temperature)
    p.add_argument("--top-k", type=int, default=DEFAULTS.top_k)
    p.add_argument("--top-p", type=float, default=DEFAULTS.top_p)
    p.add_argument("--min-p", type=float, default=DEFAULTS.min_p)
    p.add_argument("--seed", type=int, default=DEFAULTS.seed)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--json", dest="json_file", default=None, help="write the whole trace to this file")
    p.add_argument("--tensors", action="store_true", help="include the large tensors in the JSON")
    p.add_argument("--model", default=None, help="a local Hugging Face causal-LM folder instead of SmolLM2")


def options_from_args(args) -> GenerationOptions:
    """The options named on the command line; fields are matched by name, never by position."""
    values = {f.name: getattr(args, f.name) for f in fields(GenerationOptions) if hasattr(args, f.name)}
    values["stop"] = tuple(args.stop)
    return GenerationOptions(**values)


def check_output_path(path: str | None) -> None:
    """Refuse an output path that cannot be written before the run, not after it."""
    if path is None:
        return
    if os.path.isdir(path):
        raise InputError("json", f"{path} is a folder; give a file name.")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise InputError("json", f"the folder {folder} does not exist.")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise InputError("json", f"{path} cannot be written (permission denied).")


def check_model_arg(path: str | None) -> None:
    if path is not None and not os.path.isdir(path):
        raise InputError("model", f"{path} is not a folder (give a local Hugging Face model folder).")


def cmd_trace(args) -> int:
    options = options_from_args(args)
    request = ChatRequest.from_question(args.question, system=args.system, options=options)
    check_output_path(args.json_file)
    check_model_arg(args.model)
    from ..model.loader import load_model, shared_model
    from ..trace import run_trace
    from .report import print_trace

    trace = run_trace(request, shared_model() if args.model is None else load_model(args.model))
    print_trace(trace)
    if args.json_file:
        with open(args.json_file, "w", encoding="utf-8") as f:
            json.dump(trace.to_json(include_tensors=args.tensors), f, ensure_ascii=False, indent=1)
        print(f"\nWrote the trace to {args.json_file}")
    return 0


def cmd_tokens(args) -> int:
    text = check_text("text", args.text)
    if not text:
        raise InputError("text", "give some text to tokenize.")
    from ..model.loader import shared_model
    from ..stages.tokens import compare

    for r in compare(text, shared_model().tokenizer):
        ratio = len(text) / r.count if r.count else 0.0
        print(f"{r.label:32s} {r.count:5d} tokens  {ratio:5.2f} chars/token")
        print("    " + " | ".join(r.pieces))
        print("    " + str(r.ids))
    return 0


def cmd_cache_demo(args) -> int:
    from ..prompt_cache.scenarios import scenarios

    known = scenarios()
    keys = args.scenario or list(known)
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise InputError("scenario", f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(known)}.")
    if args.block_size < 1:
        raise InputError("block_size", f"must be at least 1, got {args.block_size}.")
    from ..model.loader import shared_model
    from ..prompt_cache.playback import play

    lm = shared_model()
    for key in keys:
        s = known[key]
        print(f"\n== {s.title} [{s.kind}] ==\n   {s.lesson}")
        print(f"   {'request':28s} {'tokens':>6s} {'hit':>4s} {'miss':>4s} {'part':>4s} {'reused':>6s} "
              f"{'TTFT ms':>8s} {'cold ms':>8s}")
        for row in play(lm, s, args.block_size, measure_cold=not args.no_cold):
            st = row["stats"]
            cold = f"{row['ttft_cold_s'] * 1e3:8.1f}" if row["ttft_cold_s"] is not None else f"{'-':>8s}"
            print(f"   {row['label'][:28]:28s} {st['n_tokens']:6d} {st['blocks_hit']:4d} {st['blocks_missed']:4d} "
                  f"{st['blocks_not_cacheable']:4d} {st['tokens_reused']:6d} {st['ttft_s'] * 1e3:8.1f} {cold}")
            print(f"      {row['reason']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _trace_args(sub.add_parser("trace", help="follow one chat request through every stage"))
    sub.add_parser("tokens", help="compare tokenizers on some text").add_argument("text")
    demo = sub.add_parser("cache-demo", help="play the prompt-caching scenarios and print cache hits")
    demo.add_argument("--scenario", action="append", default=[], help="scenario key (repeatable; default: all)")
    demo.add_argument("--block-size", type=int, default=16)
    demo.add_argument("--no-cold", action="store_true", help="skip the cold re-run of each request")
    return parser


COMMANDS = {"trace": cmd_trace, "tokens": cmd_tokens, "cache-demo": cmd_cache_demo}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except InputError as e:  # bad input, a --model folder that is not a model, a cache folder that fails
        print(f"error: {e}", file=sys.stderr)
        return 2
