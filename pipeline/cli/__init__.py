"""Command line: `python -m pipeline trace|tokens|cache-demo|cache-audit|serving|score|explain|speculate|
temperature-zero ...` (`COMMANDS`).

What a user typed is checked before torch is imported or the model is loaded, so bad input is
refused at once with exit code 2 and one short line naming the option (pipeline.cli.parser); only a
`--force` token id waits for the model, whose vocabulary size V it is checked against. Output files
are checked first too, and written atomically as strict JSON (a failed write keeps the old file and
exits 2). The HTML report is a command of the layer above, `python -m ui report` (ui/__main__.py),
which reuses these helpers: pipeline/ imports nothing from ui/ or views/. `cache-audit` never imports
torch. All that is printed shows control characters escaped (pipeline.cli.terminal).
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import fields

from pipeline.cli import explain
from pipeline.cli import score as score_cli
from pipeline.cli.arguments import check_model_arg, request_from_args, write_json
from pipeline.cli.parser import REQUEST_FIELDS, CliParser, error_line, field_as_typed
from pipeline.cli.serving import add_serving_args, cmd_serving
from pipeline.cli.speculate import add_speculate_args, cmd_speculate
from pipeline.cli.temperature_zero import add_temperature_zero_args, cmd_temperature_zero
from pipeline.cli.terminal import safe_output
from pipeline.core.checks import integer, shown, typed_count
from pipeline.core.errors import InputError
from pipeline.core.files import check_input_file, check_output_file
from pipeline.server.process import quiet_library_noise
from pipeline.model.interface import LanguageModel
from pipeline.stages.request import MAX_TOKEN_ID, ChatRequest, GenerationOptions, check_text, parse_logit_bias

DEFAULTS = GenerationOptions()


def add_trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("question")
    p.add_argument("--system", default=None, help="system prompt (the template adds a default one if omitted)")
    p.add_argument("--max-new-tokens", type=int, default=DEFAULTS.max_new_tokens)
    p.add_argument("--temperature", type=float, default=DEFAULTS.temperature)
    p.add_argument("--top-k", type=int, default=DEFAULTS.top_k)
    p.add_argument("--top-p", type=float, default=DEFAULTS.top_p)
    p.add_argument("--min-p", type=float, default=DEFAULTS.min_p)
    p.add_argument("--seed", type=int, default=DEFAULTS.seed)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--repetition-penalty", type=float, default=DEFAULTS.repetition_penalty,
                   help="transformers' repetition penalty over the prompt and the answer (1 = off)")
    p.add_argument("--presence-penalty", type=float, default=DEFAULTS.presence_penalty, help="OpenAI's, -2 to 2")
    p.add_argument("--frequency-penalty", type=float, default=DEFAULTS.frequency_penalty, help="OpenAI's, -2 to 2")
    p.add_argument("--logit-bias", action="append", default=[], metavar="TOKEN_ID:BIAS",
                   help="add BIAS (-100 to 100) to this token's score (repeatable)")
    p.add_argument("--json", dest="json_file", default=None, help="write the whole trace to this file")
    p.add_argument("--tensors", action="store_true", help="include the large tensors in the JSON")
    p.add_argument("--model", default=None, help="smollm2-135m (the default), gemma-3-270m, or a local Hugging Face "
                                                  "causal-LM folder")
    p.add_argument("--plain", action="store_true", help="plain-text completion: the question as it is, no chat format")
    p.add_argument("--weights", default="fp32", help="the weight format: fp32 (as loaded), bf16 or int8 (int8 weights "
                                                     "in every block, converted on load)")
    p.add_argument("--force", action="append", default=[], metavar="STEP:TOKEN_ID",
                   help="put this token at this decode step instead of the sampler's choice (repeatable)")
    p.set_defaults(typed_fields=REQUEST_FIELDS)


def options_from_args(args) -> GenerationOptions:
    """The options named on the command line; fields are matched by name, never by position."""
    values = {f.name: getattr(args, f.name) for f in fields(GenerationOptions) if hasattr(args, f.name)}
    values["stop"] = tuple(args.stop)
    values["logit_bias"] = parse_logit_bias(" ".join(args.logit_bias))
    return GenerationOptions(**values)


def parse_force(items: list[str], max_new_tokens: int) -> dict[int, int]:
    """['3:1234', '5:42'] -> {3: 1234, 5: 42}; token ids are checked against the vocabulary later."""
    out = {}
    for item in items:
        step, sep, token = item.partition(":")
        if not sep:
            raise InputError("force", f"{shown(item)} must be STEP:TOKEN_ID, two non-negative integers.")
        step = typed_count("force", step, f"the step (below --max-new-tokens {max_new_tokens})", max_new_tokens - 1)
        out[step] = typed_count("force", token, "the token id", MAX_TOKEN_ID)
    return out


def model_from_args(args):
    """The model --model names, in the format --weights names (a folder is loaded afresh, then converted)."""
    from pipeline.model.loader import converted_copy, load_model, shared_model
    from pipeline.model.registry import resolve

    if args.model and resolve(args.model).is_local:
        lm = load_model(args.model)
        return lm if args.weights == "fp32" else converted_copy(lm, args.weights)
    return shared_model(args.model, weights=args.weights)


def trace_inputs(args) -> tuple[ChatRequest, dict[int, int]]:
    """The request and the --force steps of `trace` and `python -m ui report` (add_trace_args), checked."""
    options = options_from_args(args)
    return request_from_args(args, options), parse_force(args.force, options.max_new_tokens)


def started_model(args):
    """(model, startup_s): the model --model names, loaded and warmed up (pipeline.model.warm_up); startup_s is
    the seconds both took, which a first request's TTFT then leaves out (on CUDA: the context, cuBLAS, kernels)."""
    import time

    from pipeline.model.warm_up import warm_up

    t0 = time.perf_counter()
    lm = model_from_args(args)
    warm_up(lm)
    return lm, time.perf_counter() - t0


def trace_from_args(args, request: ChatRequest, force: dict[int, int], lm: LanguageModel | None = None):
    """(model, trace): the model --model names (or `lm`, loaded already) runs the request, --force's tokens put
    at their steps."""
    from pipeline.model.capture import layout_for
    from pipeline.run.trace import run_trace

    lm = model_from_args(args) if lm is None else lm
    layout_for(lm.model)  # an architecture the capture does not know is refused here, naming what it lacks
    bad = [t for t in force.values() if t >= lm.dims.V]
    if bad:
        raise InputError("force", f"token id {bad[0]} is past the vocabulary (V = {lm.dims.V:,}).")
    return lm, run_trace(request, lm, force=force)


def cmd_trace(args) -> int:
    request, force = trace_inputs(args)
    check_output_file(args.json_file, "json")
    check_model_arg(args.model)
    from pipeline.cli.report import print_trace
    from pipeline.model.prefill import top_per_position
    from pipeline.model.registry import resolve

    lm, startup_s = started_model(args)
    lm, trace = trace_from_args(args, request, force, lm)
    spec = resolve(args.model)
    if spec.instruct is False:
        print(f"Note on {spec.display_name}: {spec.note}")
    print_trace(trace)
    print(f"  start-up {startup_s * 1000:.0f} ms before the request (model load and first-call warm-up; not in TTFT)")
    if args.json_file:
        out = trace.to_json(include_tensors=args.tensors)
        out["startup_s"] = startup_s  # the process's, before the request arrived; timings.ttft_s is the request's
        if args.tensors:  # the model's best next tokens after every prompt position, from the captured final norm
            top_ids, _, top_probs = top_per_position(lm, trace.prefill.final_norm)
            out["tensors"].update(top_ids=top_ids.tolist(), top_probs=top_probs.tolist())
        write_json(args.json_file, out, "the trace")
        print(f"\nWrote the trace to {args.json_file}")
    return 0


def cmd_tokens(args) -> int:
    text = check_text("text", args.text)
    if not text:
        raise InputError("text", "give some text to tokenize.")
    from pipeline.model.loader import shared_model
    from pipeline.stages.tokens import compare

    for r in compare(text, shared_model().tokenizer):
        ratio = len(text) / r.count if r.count else 0.0
        print(f"{r.label:32s} {r.count:5d} tokens  {ratio:5.2f} chars/token")
        print("    " + " | ".join(r.pieces))
        print("    " + str(r.ids))
    return 0


MAX_BLOCK_SIZE = 4_096  # tokens; the scenarios' prompts are a few hundred tokens, so a block this big caches nothing


def cmd_cache_demo(args) -> int:
    from pipeline.prompt_cache.scenarios import scenarios

    known = scenarios()
    keys = args.scenario or list(known)
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise InputError("scenario", f"unknown scenario {shown(unknown[0])}; choose from {', '.join(known)}.")
    integer("block_size", args.block_size, lo=1, hi=MAX_BLOCK_SIZE)
    from pipeline.model.loader import shared_model
    from pipeline.prompt_cache.playback import play_scenario

    lm = shared_model()
    for key in keys:
        s = known[key]
        print(f"\n== {s.title} [{s.kind}] ==\n   {s.lesson}")
        print(f"   {'request':28s} {'tokens':>6s} {'hit':>4s} {'miss':>4s} {'part':>4s} {'reused':>6s} "
              f"{'TTFT ms':>8s} {'cold ms':>8s}")
        for row in play_scenario(lm, s, args.block_size, measure_cold=not args.no_cold):
            st = row["stats"]
            cold = f"{row['ttft_cold_s'] * 1e3:8.1f}" if row["ttft_cold_s"] is not None else f"{'-':>8s}"
            print(f"   {row['label'][:28]:28s} {st['n_tokens']:6d} {st['blocks_hit']:4d} {st['blocks_missed']:4d} "
                  f"{st['blocks_not_cacheable']:4d} {st['tokens_reused']:6d} {st['ttft_s'] * 1e3:8.1f} {cold}")
            print(f"      {row['reason']}")
    return 0


def cmd_cache_audit(args) -> int:
    """Audit a request log under OpenAI's, Anthropic's and vLLM's prompt-cache rules (no torch needed)."""
    check_output_file(args.json_file, "json")
    check_input_file(args.file, "file")  # a device (/dev/zero) or a FIFO is refused before it is opened
    from pipeline.prompt_cache import audit as ca

    text = ca.read_log_file(args.file)
    report = ca.audit_log(text, provider=args.provider, breakpoints=args.breakpoints)
    costs = ca.bill(report, prefill_tps=args.prefill_tps, output_tokens=args.output_tokens)
    print(f"{len(report.requests)} requests; prefix and divergence for {args.provider}; tokens: {report.tokenizer}")
    print(f"{'#':>4s} {'tokens':>6s} {'shared':>6s} {'openai':>6s} {'anthr.':>6s} {'write':>6s} {'vllm':>6s} "
          f"{'diverge':>7s}  cause / trap")
    for rec in report.requests:
        c = rec.cached_tokens
        div = "-" if rec.first_divergent_index is None else str(rec.first_divergent_index)
        print(f"{rec.index:4d} {rec.prompt_tokens:6d} {rec.shared_prefix_tokens:6d} {c['openai']:6d} "
              f"{c['anthropic']:6d} {rec.anthropic.cache_creation_input_tokens:6d} {c['vllm']:6d} {div:>7s}  "
              + (f"TRAP: {ca.TRAPS[rec.trap][0]}" if rec.trap else ca.cause_words(rec.cause)))
    print(f"\n{'provider':10s} {'hit rate':>8s} {'cached':>10s} {'no cache $':>11s} {'cached $':>10s} {'saved $':>9s} "
          f"{'prefill saved':>13s}")
    for p, t in costs["totals"].items():
        print(f"{p:10s} {t['hit_rate']:8.1%} {t['cached_tokens']:10,d} {t['without_cache']:11.4f} "
              f"{t['with_cache']:10.4f} {t['saved']:9.4f} {t['latency_saved_s']:12.1f}s")
    traps = sorted({r.trap for r in report.requests if r.trap})
    for trap in traps:
        print(f"\nTrap: {ca.TRAPS[trap][0]} ({sum(r.trap == trap for r in report.requests)} requests). "
              f"Fix: {ca.TRAPS[trap][1]}")
    for warning in report.warnings:
        print(f"warning: {warning}")
    for note in report.notes:
        print(f"note: {note}")
    if args.json_file:
        write_json(args.json_file, ca.report_json(report, costs), "the audit")
        print(f"\nWrote the audit to {args.json_file}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="python -m pipeline", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_trace_args(sub.add_parser("trace", help="follow one chat request through every stage"))
    sub.add_parser("tokens", help="compare tokenizers on some text").add_argument("text")
    demo = sub.add_parser("cache-demo", help="play the prompt-caching scenarios and print cache hits")
    demo.add_argument("--scenario", action="append", default=[], help="scenario key (repeatable; default: all)")
    demo.add_argument("--block-size", type=int, default=16)
    demo.add_argument("--no-cold", action="store_true", help="skip the cold re-run of each request")
    audit = sub.add_parser("cache-audit", help="audit a JSON/JSONL request log for prompt-cache hits and cost")
    audit.add_argument("file", help="JSON array or JSONL of request bodies (or {\"ts\": ..., \"body\": {...}})")
    audit.add_argument("--provider", choices=("openai", "anthropic", "vllm"), default="openai",
                       help="whose cache lifetime decides the shared prefix and 'expired' (all three are counted)")
    audit.add_argument("--json", dest="json_file", default=None, help="write the whole audit to this file")
    audit.add_argument("--prefill-tps", type=float, default=None,
                       help="the provider's prefill speed, tokens/s, for time saved (default: each provider's "
                            "stand-in figure in assets/cache_rules.json)")
    audit.add_argument("--output-tokens", type=int, default=200, help="output tokens per request the log omits")
    audit.add_argument("--breakpoints", choices=("auto", "as-sent"), default="auto",
                       help="Anthropic: add the recommended breakpoints to requests sent without cache_control")
    add_serving_args(sub)
    score_cli.add_parser(sub)
    explain.add_args(sub.add_parser("explain", help="why the model chose a token: logit attribution, routes, inputs"))
    add_speculate_args(sub)
    add_temperature_zero_args(sub)
    return parser


COMMANDS = {"trace": cmd_trace, "tokens": cmd_tokens, "cache-demo": cmd_cache_demo, "cache-audit": cmd_cache_audit,
            "serving": cmd_serving, "score": score_cli.cmd_score, "explain": explain.cmd_explain,
            "speculate": cmd_speculate, "temperature-zero": cmd_temperature_zero}


def main(argv=None) -> int:
    return run_command(build_parser(), COMMANDS, argv)


def run_command(parser: argparse.ArgumentParser, commands: dict, argv=None) -> int:
    """Parse argv and run its command: bad input exits 2 with a message naming the field (also `python -m ui`)."""
    # transformers' progress bars redraw with '\r', which the terminal filter shows escaped; loading takes ~1 s
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    quiet_library_noise()  # torchao's and torch's import-time lines: stderr shows only what concerns the user
    with safe_output():
        args = parser.parse_args(argv)
        try:
            return commands[args.command](args)
        except InputError as e:  # bad input, a --model folder that is not a model, a cache folder that fails
            print(f"error: {error_line(f'{field_as_typed(e.field, args)}: {e.message}')}", file=sys.stderr)
            return 2
        except BrokenPipeError:  # `... | head`: the reader has gone; say nothing more (Python's docs' recipe)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
