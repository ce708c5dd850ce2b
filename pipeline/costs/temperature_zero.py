"""Temperature 0 at scale: one greedy request run N times through the room's own continuous batching
(pipeline.stages.batched_decoding.BatchDecoder, the decoder the queue's trace engine steps), each run inside a
different batch mix, and how many distinct completions come out (parting.py counts them and finds where they part).

The mix is made by a seeded schedule, so a run can be repeated: before every decode step a random number of
requests arrive (a Poisson draw whose rate is redrawn every RATE_STEPS steps, so the batch swells and drains);
each is one of the N copies of the request or, with probability `filler_share`, another question with its own
answer length (1 to twice the request's), so rows join and leave at different steps, the batch's size and the
request's row in it change, and its row is left-padded by different amounts. Arrivals are prefilled as the room
prefills them (pipeline.model.prefill: several together in one pass when they can be, else alone) and join the
running batch, at most `max_batch` rows. Nothing here is CPU-only: on a GPU the same code runs the GPU's kernels.

    t = temperature_zero(lm, requests=1000, new_tokens=24)   # t.tally.distinct, t.tally.parted_at
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from pipeline.core.checks import integer, number
from pipeline.core.long_jobs import Progress, Steps, run_to_end
from pipeline.costs.batched import QUESTIONS
from pipeline.costs.parting import Pass, Tally, TopScores, tally
from pipeline.model.interface import LanguageModel
from pipeline.stages.generation import Answer
from pipeline.stages.request import ChatRequest, GenerationOptions

KEPT_SCORES = 4  # best scores kept per run and step: the near-tie's two tokens are among them
RATE_STEPS = 16  # steps between redraws of the arrival rate
RATES = (0.2, 3.0)  # arrivals per step, drawn uniformly: from a trickle (a batch of 1-2) to a burst


@dataclass(frozen=True)
class TemperatureZero:
    model: str
    device: str
    question: str
    requests: int
    new_tokens: int
    max_batch: int
    filler_share: float
    seed: int
    fillers: int  # other requests that ran beside them
    steps: int  # decode steps of the whole run
    seconds: float
    tally: Tally

    def to_json(self, variants: bool = True) -> dict:
        head = {k: getattr(self, k) for k in ("model", "device", "question", "requests", "new_tokens", "max_batch",
                                               "filler_share", "seed", "fillers", "steps", "seconds")}
        return head | self.tally.to_json(variants)


class WatchedAnswer(Answer):
    """An Answer that keeps its KEPT_SCORES best scores before each choice (the prefill's, then each pass's)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tops: list[TopScores] = [best_scores(self.logits)]
        self.passes: list[Pass] = []

    def fed(self, logits, kth: float | None = None) -> None:
        super().fed(logits, kth)
        self.tops.append(best_scores(logits))


def best_scores(logits) -> TopScores:
    from pipeline.stages.generation import scores

    x = scores(logits)
    top = np.argpartition(-x, KEPT_SCORES - 1)[:KEPT_SCORES]
    top = top[np.argsort(-x[top], kind="stable")]
    return [int(i) for i in top], [float(x[i]) for i in top]


def check_arguments(requests, new_tokens, max_batch, filler_share, seed) -> None:
    """The door's checks (the CLI calls this before loading the model)."""
    integer("requests", requests, 1, 100_000)
    integer("new_tokens", new_tokens, 1, 512)
    integer("max_batch", max_batch, 1, 1024)
    number("filler_share", filler_share, 0.0, 0.9)
    integer("seed", seed, 0, 2**32 - 1)


def _prefill(lm: LanguageModel, prompts: list[list[int]]) -> tuple[list, list[Pass]]:
    """The arrivals' prefill as the room runs it (pipeline.run.trace.prefill_together): one pass when it can, else
    one each. Also each prompt's pass: (rows in it, its row, its padding: a batched prefill pads on the right)."""
    from pipeline.model.prefill import can_batch_prefill, run_prefill, run_prefill_batch

    if can_batch_prefill(lm, prompts):
        width = max(len(p) for p in prompts)
        return run_prefill_batch(lm, prompts), [(len(prompts), k, width - len(p)) for k, p in enumerate(prompts)]
    return [run_prefill(lm, p) for p in prompts], [(1, 0, 0)] * len(prompts)


def temperature_zero(lm: LanguageModel, requests: int = 1000, new_tokens: int = 24, max_batch: int = 32,
                     filler_share: float = 0.25, seed: int = 0, question: str = QUESTIONS[0],
                     static: bool | None = None) -> TemperatureZero:
    """The same greedy request `requests` times, each run in its own batch mix (see the module's note). static:
    the batch's step as open_batch takes it (None: the trace engine's choice, the static step on CUDA only)."""
    return run_to_end(temperature_zero_steps(lm, requests, new_tokens, max_batch, filler_share, seed, question,
                                             static))


def temperature_zero_steps(lm: LanguageModel, requests: int = 1000, new_tokens: int = 24, max_batch: int = 32,
                           filler_share: float = 0.25, seed: int = 0, question: str = QUESTIONS[0],
                           static: bool | None = None) -> Steps[TemperatureZero]:
    """temperature_zero as a long job (pipeline.core.long_jobs): the arguments are checked now, then each decode
    step of the running batch (with the arrivals' prefill before it) is a chunk; progress counts the runs done."""
    check_arguments(requests, new_tokens, max_batch, filler_share, seed)
    return _steps(lm, requests, new_tokens, max_batch, filler_share, seed, question, static)


def _steps(lm: LanguageModel, requests: int, new_tokens: int, max_batch: int, filler_share: float, seed: int,
           question: str, static: bool | None):
    from pipeline.stages.graphed_batch_decoding import open_batch
    from pipeline.stages.tokens import tokenize_request

    rng = np.random.default_rng(seed)
    tokenize = lambda q: tokenize_request(lm.tokenizer, ChatRequest.from_question(q)).ids  # noqa: E731
    mine = tokenize(question)
    others = [tokenize(q) for q in QUESTIONS if q != question]
    options = GenerationOptions(max_new_tokens=new_tokens)
    batch, runs, ended = open_batch(lm, static=static), [], 0  # as the trace engine's: static on CUDA
    admitted = fillers = steps = 0
    rate = 0.0
    t0 = time.perf_counter()
    while admitted < requests or len(batch):
        if steps % RATE_STEPS == 0:
            rate = rng.uniform(*RATES)
        arriving = []  # (prompt ids, options, is one of the request's runs)
        room = max_batch - len(batch)
        for _ in range(min(room, int(rng.poisson(rate)) + (not len(batch))) if admitted < requests else 0):
            if rng.random() < filler_share:
                ids = others[int(rng.integers(len(others)))]
                arriving.append((ids, GenerationOptions(max_new_tokens=int(rng.integers(1, 2 * new_tokens + 1))),
                                 False))
                fillers += 1
            else:
                arriving.append((mine, options, True))
                admitted += 1
                if admitted == requests:
                    break
        if arriving:
            started, prefill_passes = _prefill(lm, [ids for ids, _, _ in arriving])
            for (ids, opts, watched), s, prefilled in zip(arriving, started, prefill_passes):
                now = time.perf_counter()
                kind = WatchedAnswer if watched else Answer
                answer = kind(lm, s.last_logits, opts, f"r{len(runs)}", now, record=False, prompt_ids=ids)
                batch.join(answer, s.kv_cache)
                if watched:
                    answer.passes.append(prefilled)
                    runs.append(answer)
        ended += sum(isinstance(r.answer, WatchedAnswer) for r in batch.step())
        steps += 1
        for i, row in enumerate(batch.rows):  # the pass just run, in its row order
            if isinstance(row.answer, WatchedAnswer):
                row.answer.passes.append((len(batch.rows), i, batch.padding(row)))
        for row in batch.solo:  # a run decoded on its own (a sliding window shorter than the batch needs)
            if isinstance(row.answer, WatchedAnswer):
                row.answer.passes.append((1, 0, 0))
        yield Progress(ended, requests, f"{ended} of {requests} runs done, {admitted} admitted; a batch of "
                                        f"{len(batch)}")
    seconds = time.perf_counter() - t0
    t = tally([a.generated for a in runs], [a.tops for a in runs], [a.passes for a in runs])
    texts = [lm.tokenizer.decode(c.token_ids) for c in t.completions]
    t = replace(t, completions=[replace(c, text=x) for c, x in zip(t.completions, texts)])
    return TemperatureZero(lm.name, str(lm.device), question, requests, new_tokens, max_batch, filler_share, seed,
                           fillers, steps, seconds, t)
