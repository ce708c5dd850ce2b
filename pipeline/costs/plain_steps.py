"""The plain serving path's passes placed on the roofline, beside the captured run's, and this machine's fixed
cost of a pass (the overhead that an overhead-bound pass is held by).

- `plain_points`: the request answered on the plain path (pipeline.faster.fast_path: no captures) a few times;
  its TTFT stands for the prefill pass (it adds the tokenizing and the first choice: a little over the pass)
  and its TPOT for one decode step (one pass and the choosing), medians with their range.
- `fixed_cost`: a pass at almost no work, one token with nothing cached, through the model's forward without
  captures. Its time minus what the ceilings allow for its bytes and FLOPs is what any pass pays on top here; the
  operations it runs (pipeline.costs.launches) say where that goes: about a thousand small ones, each paid whatever
  its size.

    run = plain_points(lm, request); place_plain(run, lm.dims)   # (placed prefill, placed decode step)
    probe = fixed_cost(lm); probe.placed.overhead_s(roof)        # seconds a pass pays beyond the ceilings
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace

from pipeline.core.checks import integer
from pipeline.core.errors import InputError
from pipeline.costs.launches import Operations, operations
from pipeline.costs.named_time import PLAIN, NamedTime, of_runs
from pipeline.costs.pass_costs import decode_cost, pass_cost, prefill_cost
from pipeline.costs.roofline import Placed, place
from pipeline.model.dims import ModelDims
from pipeline.model.interface import LanguageModel

PLAIN_STEPS = 16  # answer tokens per plain run: TPOT needs a few steps


@dataclass(frozen=True)
class PlainRun:
    prompt_tokens: int
    answer_tokens: int  # of the shortest run
    ttft: NamedTime  # plain path, median and range
    tpot: NamedTime  # plain path, median and range
    measured_at: float


@dataclass(frozen=True)
class FixedCost:
    placed: Placed  # the 1-token pass at its median time
    runs: tuple[float, ...]  # seconds of each repeat
    measured_at: float
    operations: Operations  # what the pass runs, op by op (pipeline.costs.launches): a kernel launch each on a GPU


def plain_points(lm: LanguageModel, request, steps: int = PLAIN_STEPS, repeats: int = 3,
                 max_prompt_tokens: int | None = None) -> PlainRun:
    """The request on the plain path, `repeats` times, `steps` answer tokens each (fewer if it stops sooner)."""
    from pipeline.faster.fast_path import generate

    integer("steps", steps, 2, 1000)
    integer("repeats", repeats, 1, 100)
    options = replace(request.options, max_new_tokens=min(steps, request.options.max_new_tokens))
    short = replace(request, options=options)
    answers = [generate(lm, short, max_prompt_tokens) for _ in range(repeats)]
    tpots = [a.tpot_s for a in answers if a.tpot_s is not None]
    if not tpots:
        raise InputError("max_new_tokens", "the answer is a single token: there is no decode step to time. "
                                           "Ask for 2 or more new tokens.")
    return PlainRun(len(answers[0].prompt_ids), min(len(a.generated) for a in answers),
                    of_runs("TTFT", PLAIN, [a.ttft_s for a in answers]), of_runs("TPOT", PLAIN, tpots), time.time())


def place_plain(run: PlainRun, m: ModelDims) -> tuple[Placed, Placed]:
    """(the prefill pass at the plain TTFT, a decode step at the plain TPOT, in the middle of the answer)."""
    n = run.prompt_tokens
    return (place(prefill_cost(m, n), run.ttft.seconds, f"prefill ({n} tokens), plain path"),
            place(decode_cost(m, n + max(run.answer_tokens // 2, 1) - 1), run.tpot.seconds, "decode step, plain path"))


def fixed_cost(lm: LanguageModel, repeats: int = 7) -> FixedCost:
    """A 1-token pass with nothing cached, timed `repeats` times after a warm-up: its median placed."""
    integer("repeats", repeats, 1, 100)
    token = [[min(1000, lm.dims.V - 1)]]
    lm.forward(token).logits.float().cpu()  # warm-up: the first call pays for allocations
    ops = operations(lambda: lm.forward(token))  # counted apart: counting slows the pass it counts
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        lm.forward(token).logits.float().cpu()  # .cpu() waits for a GPU
        runs.append(time.perf_counter() - t0)
    return FixedCost(place(pass_cost(lm.dims, 1, 0), statistics.median(runs), "1-token pass, nothing cached"),
                     tuple(runs), time.time(), ops)
