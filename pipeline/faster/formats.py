"""What each weight format costs and buys, measured on the model: bytes, speed and quality against fp32.

Quality is the next-token distribution compared with fp32's at every position of a few prompts (one pass
over each prompt, the captured path's own forward): the mean KL divergence KL(P_fp32 || P_format) in nats,
and how often the top token is the same. Greedy answers on the plain serving path are compared token for
token. Speed is the plain path's time per output token (TPOT), every format measured in turn, round after
round (interleaved), reported as medians with their range; a ratio only where the ranges do not overlap.

    report = measure_formats({"fp32": lm, "int8": lm8}, ChatRequest.from_question("Are tomatoes fruit?"))
    report.rows["int8"].kl_mean, report.rows["int8"].same_greedy, report.tpot["int8"]
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from pipeline.core.common_prefix import first_difference
from pipeline.core.timing import Comparison, compare_runs
from pipeline.model.interface import LanguageModel
from pipeline.stages.request import ChatRequest

QUALITY_PROMPTS = ("Are tomatoes fruit?", "Write a haiku about the sea.", "What is the capital of France?",
                   "Explain photosynthesis in two sentences.", "List three prime numbers.")


@dataclass(frozen=True)
class FormatRow:
    """One format against fp32."""

    weights: str
    parameter_bytes: int  # what the network holds (tied weights once; int8: data and scales)
    bytes_per_token: int  # weight bytes one decode step reads (pipeline.model.weight_formats.bytes_per_token)
    kl_mean: float  # mean over every prompt position of KL(P_fp32 || P_format), nats
    kl_max: float  # the largest at any position
    top1_agreement: float  # share of positions whose top token equals fp32's
    positions: int  # positions compared
    greedy_ids: tuple[int, ...]  # the greedy answer on the plain path
    greedy_text: str
    first_difference: int | None  # first index where the greedy answer leaves fp32's; None: the same

    @property
    def same_greedy(self) -> bool:
        return self.first_difference is None


@dataclass(frozen=True)
class Timing:
    """TPOT of one format: the median and range of its rounds, in seconds."""

    median: float
    low: float
    high: float
    runs: tuple[float, ...]


@dataclass(frozen=True)
class FormatsReport:
    rows: dict[str, FormatRow]  # by format, fp32 first
    tpot: dict[str, Timing]  # by format
    steps: int  # decode steps per timed answer
    vs_fp32: dict[str, Comparison]  # each other format against fp32 (a = the format, b = fp32)


def prompt_ids(lm: LanguageModel, question: str) -> list[int]:
    """The question as the model is asked it (its chat format), from the pipeline's own tokenizer stage."""
    from pipeline.stages.tokens import tokenize_request

    return list(tokenize_request(lm.tokenizer, ChatRequest.from_question(question)).ids)


def position_log_probs(lm: LanguageModel, ids: list[int]):
    """(T, V) float64 log-probabilities of the next token at every position of `ids`, one pass."""
    import torch

    logits = lm.forward([ids], logits_to_keep=0, use_cache=False).logits[0]  # (T, V)
    return torch.log_softmax(logits.double(), dim=-1)


def kl_per_position(reference, other):
    """KL(P || Q) per position from log-probabilities (T, V) each: sum_v P (log P - log Q) -> (T,)."""
    return (reference.exp() * (reference - other)).sum(-1)


def greedy_answer(lm: LanguageModel, question: str, max_new_tokens: int) -> tuple[tuple[int, ...], str, float | None]:
    """The greedy answer on the plain serving path: (ids, text, TPOT seconds)."""
    from pipeline.faster.fast_path import generate
    from pipeline.stages.request import GenerationOptions

    request = ChatRequest.from_question(question, options=GenerationOptions(max_new_tokens=max_new_tokens))
    answer = generate(lm, request)
    return tuple(answer.generated), answer.text, answer.tpot_s


def step_cost(lm: LanguageModel, question: str, steps: int) -> tuple[float, float]:
    """(wall, CPU) seconds a greedy decode step takes on the plain path, the mean over `steps` steps after the
    question's prefill. CPU is the whole process's (every thread's, waits included): what a step costs a shared
    server, where wall time is what the user waits."""
    import time

    from pipeline.model.decoders.factory import open_decoder

    ids = prompt_ids(lm, question)
    decoder = open_decoder(lm, len(ids) + steps + 1)
    token = int(decoder.prefill(ids).argmax())
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        token = int(decoder.step(token).argmax())
    return (time.perf_counter() - wall) / steps, (time.process_time() - cpu) / steps


def quality_rows(models: dict[str, LanguageModel], question: str, prompts: tuple[str, ...] | None = None,
                 max_new_tokens: int = 32) -> dict[str, FormatRow]:
    """Each format of `models` (fp32 among them) against fp32: KL over `prompts` (QUALITY_PROMPTS), top-1
    agreement, the greedy answer to `question`."""
    import torch

    from pipeline.model.weight_formats import bytes_per_token, parameter_bytes

    prompts = prompts or QUALITY_PROMPTS
    reference = {p: position_log_probs(models["fp32"], prompt_ids(models["fp32"], p)) for p in prompts}
    fp32_greedy = greedy_answer(models["fp32"], question, max_new_tokens)
    rows = {}
    for weights, lm in models.items():
        kl, agree = [], []
        for p in prompts:
            other = position_log_probs(lm, prompt_ids(lm, p))
            kl.append(kl_per_position(reference[p], other))
            agree.append(reference[p].argmax(-1) == other.argmax(-1))
        kl_all, agree_all = torch.cat(kl), torch.cat(agree)
        ids, text, _ = fp32_greedy if weights == "fp32" else greedy_answer(lm, question, max_new_tokens)
        rows[weights] = FormatRow(weights, parameter_bytes(lm.model), bytes_per_token(lm.model),
                                  float(kl_all.mean()), float(kl_all.max()), float(agree_all.float().mean()),
                                  int(kl_all.numel()), ids, text, first_difference(ids, fp32_greedy[0]))
    return rows


def tpot_interleaved(models: dict[str, LanguageModel], question: str, steps: int = 16,
                     repeats: int = 3) -> dict[str, Timing]:
    """Each format's plain-path TPOT, the formats in turn within each of `repeats` rounds (load hits all alike)."""
    runs: dict[str, list[float]] = {w: [] for w in models}
    for _ in range(repeats):
        for weights, lm in models.items():
            runs[weights].append(greedy_answer(lm, question, steps)[2] or 0.0)
    return {w: Timing(statistics.median(r), min(r), max(r), tuple(r)) for w, r in runs.items()}


def measure_formats(models: dict[str, LanguageModel], request: ChatRequest, steps: int = 16,
                    repeats: int = 3, prompts: tuple[str, ...] | None = None) -> FormatsReport:
    """Quality rows and interleaved TPOT for every format of one model (`models` holds fp32)."""
    question = request.messages[-1][1]
    rows = quality_rows(models, question, prompts, max_new_tokens=2 * steps)
    tpot = tpot_interleaved(models, question, steps, repeats)
    vs = {w: compare_runs(list(t.runs), list(tpot["fp32"].runs)) for w, t in tpot.items() if w != "fp32"}
    return FormatsReport(rows, tpot, steps, vs)


def bf16_advice(report: FormatsReport) -> str:
    """What this machine's measurement says about `--weights bf16` (a room's server), in one sentence built from
    bf16's TPOT against fp32's in `report`:

        ratio 0.6, ranges apart   -> "bf16 decoded 1.7× faster than fp32 here ...: ... less CPU a token ..."
        ratio 1.4, ranges apart   -> "bf16 decoded 1.4× slower than fp32 here ...: keep ... on fp32"
        ranges overlap            -> "... within each other's range here ...: no saving measured"
    """
    c = report.vs_fp32.get("bf16")
    if c is None:
        return ""
    times = f"(median {c.a_median * 1e3:.1f} ms against {c.b_median * 1e3:.1f} ms a token, plain path)"
    if not c.separated:
        return (f"bf16 and fp32 decoded within each other's range here {times}: no saving measured on this machine "
                "now, so `--weights bf16` is not worth it for a room's server on this evidence.")
    if c.ratio < 1:
        return (f"bf16 decoded {c.speed()} than fp32 here {times}: on this machine a room's server spends less CPU a "
                "token with `./run.sh app --weights bf16`.")
    return (f"bf16 decoded {c.speed()} than fp32 here {times}: keep a room's server on this machine on fp32 "
            "(`--weights bf16` would cost more CPU a token).")
