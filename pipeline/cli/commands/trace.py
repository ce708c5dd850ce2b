"""`python -m pipeline trace QUESTION [options]`: one chat request through every stage, printed stage by stage
(pipeline.cli.trace_text), `--json` the whole trace. Its request options and helpers (`trace_inputs`,
`trace_from_args`) are the report's too (`tpe report`, ui/report_command.py)."""
from __future__ import annotations

import argparse
from dataclasses import fields

from pipeline.cli.arguments import check_model_arg, request_from_args, write_json
from pipeline.cli.parser import REQUEST_FIELDS
from pipeline.core.checks import in_vocabulary, shown, typed_count
from pipeline.core.errors import InputError
from pipeline.core.files import check_output_file
from pipeline.model.interface import LanguageModel
from pipeline.run.samples import MAX_SAMPLES, check_count
from pipeline.stages.logit_bias import parse_logit_bias
from pipeline.stages.request import MAX_TOKEN_ID, ChatRequest, GenerationOptions, check_temperature

NAME = "trace"
HELP = "follow one chat request through every stage"
DEFAULTS = GenerationOptions()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("question")
    p.add_argument("--system", default=None, help="system prompt (the template adds a default one if omitted)")
    p.add_argument("--max-new-tokens", type=int, default=DEFAULTS.max_new_tokens)
    temperature = p.add_mutually_exclusive_group()
    temperature.add_argument("--temperature", type=float, default=DEFAULTS.temperature)
    temperature.add_argument("--temperatures", default=None, metavar="T1,T2,...",
                             help="one temperature per sample, drawn together in one batch (--samples is then their "
                                  "number)")
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
    p.add_argument("--commitment", action="store_true",
                   help="where each answer token was decided: the first layer from which the logit lens keeps it "
                        "(top-1, top-3, probability over 0.5) through the last; one more pass of the model")
    p.add_argument("--samples", type=int, default=None, metavar="N",
                   help=f"draw N samples (1 to {MAX_SAMPLES}) together in one batch, sample i seeded SEED + i at "
                        "--temperature (or its own of --temperatures), and compare them position by position")
    p.add_argument("--model", default=None, help="smollm2-135m (the default), gemma-3-270m, or a local Hugging Face "
                                                  "causal-LM folder")
    p.add_argument("--plain", action="store_true", help="plain-text completion: the question as it is, no chat format")
    p.add_argument("--weights", default="fp32", help="the weight format: fp32 (as loaded), bf16 or int8 (int8 weights "
                                                     "in every block, converted on load)")
    p.add_argument("--force", action="append", default=[], metavar="STEP:TOKEN_ID",
                   help="put this token at this decode step instead of the sampler's choice (repeatable)")
    p.set_defaults(typed_fields=REQUEST_FIELDS)


def run(args) -> int:
    request, force = trace_inputs(args)
    check_output_file(args.json_file, "json")
    check_model_arg(args.model)
    temperatures = sample_temperatures(args)
    if temperatures is not None:
        return run_samples(args, request, force, temperatures)
    from pipeline.cli.trace_text import print_trace
    from pipeline.model.prefill import top_per_position
    from pipeline.model.registry import resolve

    lm, startup_s = started_model(args)
    lm, trace = trace_from_args(args, request, force, lm)
    spec = resolve(args.model)
    if spec.instruct is False:
        print(f"Note on {spec.display_name}: {spec.note}")
    print_trace(trace)
    print(f"  start-up {startup_s * 1000:.0f} ms before the request (model load and first-call warm-up; not in TTFT)")
    commitment = None
    if args.commitment:
        from pipeline.cli.commitment_text import print_commitment
        from pipeline.stages.commitment import answer_commitment

        commitment = answer_commitment(lm, trace.ids, trace.generated_token_ids)
        print_commitment(lm.tokenizer, commitment, lm.dims.L)
    if args.json_file:
        out = trace.to_json(include_tensors=args.tensors)
        out["startup_s"] = startup_s  # the process's, before the request arrived; timings.ttft_s is the request's
        if args.tensors:  # the model's best next tokens after every prompt position, from the captured final norm
            top_ids, _, top_probs = top_per_position(lm, trace.prefill.final_norm)
            out["tensors"].update(top_ids=top_ids.tolist(), top_probs=top_probs.tolist())
        if commitment is not None:
            out["commitment"] = commitment.to_json()
        write_json(args.json_file, out, "the trace")
        print(f"\nWrote the trace to {args.json_file}")
    return 0


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


def parse_temperatures(text: str) -> list[float]:
    """'0, 1.0,1.5' -> [0.0, 1.0, 1.5]: one per sample (at most MAX_SAMPLES), each one a request accepts."""
    items = text.split(",")
    if len(items) > MAX_SAMPLES:
        raise InputError("temperatures", f"gives {len(items):,} temperatures; at most {MAX_SAMPLES} samples are drawn "
                                         "in one batch.")
    out = []
    for n, item in enumerate(items, 1):
        if not item.strip():
            raise InputError("temperatures", f"temperature {n} is empty: give one number per sample, separated by "
                                             "commas (0,1.0,1.5).")
        try:
            t = float(item)
        except ValueError:
            raise InputError("temperatures", f"temperature {n}, {shown(item.strip())}, is not a number.") from None
        try:
            out.append(check_temperature("temperatures", t))
        except InputError as e:
            raise InputError("temperatures", f"temperature {n} {e.message}") from None
    return out


def sample_temperatures(args) -> list[float] | None:
    """Each sample's temperature, --samples and --temperatures checked against each other; None for one run."""
    n = None if args.samples is None else check_count(args.samples)
    if args.temperatures is None:
        return None if n is None else [args.temperature] * n
    temperatures = parse_temperatures(args.temperatures)
    if n is not None and n != len(temperatures):
        raise InputError("temperatures", f"gives {len(temperatures)} temperatures but --samples is {n}: one per "
                                         "sample (or leave --samples out).")
    return temperatures


def model_from_args(args):
    """The model --model names, in the format --weights names (a folder is loaded afresh, then converted)."""
    from pipeline.model.loader import converted_copy, load_model, shared_model
    from pipeline.model.registry import resolve

    if args.model and resolve(args.model).is_local:
        lm = load_model(args.model)
        return lm if args.weights == "fp32" else converted_copy(lm, args.weights)
    return shared_model(args.model, weights=args.weights)


def trace_inputs(args) -> tuple[ChatRequest, dict[int, int]]:
    """The request and the --force steps of `trace` and `report` (add_arguments), checked."""
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
    in_vocabulary("force", force.values(), lm.dims.V)
    return lm, run_trace(request, lm, force=force)


def run_samples(args, request: ChatRequest, force: dict[int, int], temperatures: list[float]) -> int:
    """`trace --samples N` or `--temperatures T1,...`: the samples in one batch, sample i seeded --seed + i at
    temperatures[i]; the JSON holds "samples" [{seed, temperature, generated_token_ids, ...}] and "positions"
    [{position, disagree, divergence, ...}]."""
    for name, given in (("force", force), ("commitment", args.commitment), ("tensors", args.tensors)):
        if given:
            raise InputError(name, "is for one run; leave it out with --samples or --temperatures (or run each seed "
                                   "on its own).")
    from pipeline.cli.samples_text import print_samples
    from pipeline.run.samples import draw_samples

    lm, startup_s = started_model(args)
    samples = draw_samples(request, lm, temperatures, request.options.seed)
    print_samples(lm.tokenizer, samples)
    if args.json_file:
        options = request.options.to_dict()
        del options["temperature"]  # each sample's own is in "samples"
        out = {"model": lm.dims.name, "prompt_token_ids": samples.prompt_ids, "options": options,
               **samples.to_json(), "startup_s": startup_s}
        write_json(args.json_file, out, "the samples")
        print(f"\nWrote the samples to {args.json_file}")
    return 0
