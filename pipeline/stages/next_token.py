"""Stage: the next token. From logits to one chosen token: penalties and bias, temperature, top-k, top-p, min-p,
a draw.

Every filter stage is kept so a page can show the distribution before and after each one.
Worked example (seed article): logits [3, 2.2, 1.6, 1.1, -1.5] -> [54, 24, 13, 8, 0.6] %.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pipeline.core.checks import array, integer, number, token_ids
from pipeline.core.errors import InputError
from pipeline.core.maths import softmax as _softmax
from pipeline.core.maths import top_indices
from pipeline.stages.penalties import penalized
from pipeline.stages.request import GenerationOptions
from pipeline.text.token_names import tokens_text
from pipeline.text.unfinished import continuation_label

STAGE_NAMES = ("softmax", "penalties", "temperature", "top_k", "top_p", "min_p")
MAX_DRAWS = 10_000_000  # the page offers 10,000; 10 million draws are 80 MB of float64
TIE_RULE = ("Ties at a cut are kept whole: top-k keeps every token tied with the k-th (so sometimes more than k), "
            "as Hugging Face transformers does; top-p keeps every token tied with the last one it needs, where "
            "transformers keeps only as many of the tied tokens as its sort happens to put first.")


@dataclass(frozen=True)
class Stage:
    name: str  # one of STAGE_NAMES
    probs: np.ndarray  # (V,) float64, sums to 1, zeros where filtered out
    kept: int  # candidates still allowed after this stage


def softmax(logits: np.ndarray) -> np.ndarray:
    """(V,) -> (V,); -inf entries get probability 0. Refuses a row with nothing left to draw."""
    p = _softmax(array("logits", logits, ndim=1))
    if not p.any():
        raise InputError("logits", "every candidate is masked out (-inf); nothing can be drawn.")
    return p


def _renorm(p: np.ndarray, keep: np.ndarray) -> np.ndarray:
    out = np.where(keep, p, 0.0)
    return out / out.sum()


def tempered(logits: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(logits / T), computed as softmax((logits - max) / T) so no value overflows.

    temperature 0 is greedy: all mass on the best token (the first one on a tie).
    """
    x = array("logits", logits, ndim=1)
    if number("temperature", temperature, lo=0) == 0:
        p = np.zeros_like(x)
        p[int(np.argmax(x))] = 1.0
        return p
    finite = np.isfinite(x)
    with np.errstate(over="ignore"):  # -1e308 - 1e308 -> -inf: probability 0, as it should be
        shifted = np.where(finite, x - x[finite].max(), -np.inf) if finite.any() else x
        return softmax(shifted / temperature)


def filter_stages(logits: np.ndarray, options: GenerationOptions, prompt_ids: Sequence[int] = (),
                  generated_ids: Sequence[int] = ()) -> list[Stage]:
    """Apply penalties and bias -> temperature -> top-k -> top-p -> min-p (the order HF's samplers use).

    The penalties (pipeline.stages.penalties) need what came before: the prompt's ids and the answer's so far.

    Ties at a cut are kept whole (TIE_RULE), so the result never depends on token ids or sort order:
    top-k 2 of [0.4, 0.3, 0.3] keeps all three; top-p 0.5 of [0.25, 0.25, 0.25, 0.25] keeps all four.

    `options` was validated when it was built; nothing is checked again per step.
    """
    if not isinstance(options, GenerationOptions):
        raise InputError("options", f"must be GenerationOptions, got {type(options).__name__}.")
    raw = softmax(logits)
    stages = [Stage("softmax", raw, int((raw > 0).sum()))]
    if options.penalized:
        logits = penalized(logits, options, prompt_ids, generated_ids)
        shaped = softmax(logits)
    else:
        shaped = raw
    stages.append(Stage("penalties", shaped, int((shaped > 0).sum())))
    p = shaped if options.temperature == 1 else tempered(logits, options.temperature)
    stages.append(Stage("temperature", p, int((p > 0).sum())))
    if options.top_k > 0 and options.top_k < (p > 0).sum():
        kth = np.partition(p, p.size - options.top_k)[p.size - options.top_k]  # the k-th largest probability
        p = _renorm(p, p >= kth)  # ties with the k-th are kept too (as transformers' TopKLogitsWarper does)
    stages.append(Stage("top_k", p, int((p > 0).sum())))
    if options.top_p < 1.0:
        alive = np.flatnonzero(p)  # sort only the candidates still in play (few after top-k)
        order = alive[np.argsort(-p[alive], kind="stable")]
        before = np.cumsum(p[order]) - p[order]  # mass of the better candidates
        last = order[before < options.top_p][-1]  # keep until the running total reaches top_p ...
        p = _renorm(p, p >= p[last])  # ... and every token tied with the last one kept (HF keeps some of them)
    stages.append(Stage("top_p", p, int((p > 0).sum())))
    if options.min_p > 0:
        p = _renorm(p, p >= options.min_p * p.max())
    stages.append(Stage("min_p", p, int((p > 0).sum())))
    return stages


def final_probs(logits: np.ndarray, options: GenerationOptions, prompt_ids: Sequence[int] = (),
                generated_ids: Sequence[int] = ()) -> np.ndarray:
    return filter_stages(logits, options, prompt_ids, generated_ids)[-1].probs


def draw(probs: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n independent draws, vectorized: inverse CDF with one searchsorted, no Python loop."""
    n = integer("draws", n, 0, MAX_DRAWS)
    probs = array("probs", probs, ndim=1)
    cdf = np.cumsum(probs)
    if not (np.isfinite(cdf[-1]) and cdf[-1] > 0 and probs.min() >= 0):
        raise InputError("probs", "must be probabilities: finite, at least 0, not all 0.")
    picks = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
    return np.minimum(picks, len(probs) - 1)


def empirical(draws: np.ndarray, size: int) -> np.ndarray:
    """Share of draws that landed on each id: (V,)."""
    draws = array("draws", draws, ndim=1, dtype=None, min_len=0)
    size = integer("size", size, 0, MAX_DRAWS)
    if draws.size and (draws.dtype.kind not in "iu" or draws.min() < 0):
        raise InputError("draws", "must be token ids (whole numbers of at least 0).")
    return np.bincount(draws.astype(np.int64), minlength=size) / max(len(draws), 1)


def mask_logits(logits: np.ndarray, allowed_ids) -> np.ndarray:
    """Constrained output: every id not allowed gets -inf, so its probability is exactly 0."""
    logits = array("logits", logits, ndim=1)
    try:
        ids = list(allowed_ids)
    except TypeError:
        ids = None
    # whole numbers only: numpy would quietly turn 1.5 into 1, "3" into 3 and [()] into no id at all
    if ids is None or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in ids):
        raise InputError("allowed_ids", "must be a list of token ids.")
    try:
        allowed = np.asarray(ids, dtype=np.int64)
    except OverflowError:
        raise InputError("allowed_ids", f"token ids must be in 0..{logits.shape[-1] - 1}.") from None
    if allowed.size and (allowed.min() < 0 or allowed.max() >= logits.shape[-1]):
        raise InputError("allowed_ids", f"token ids must be in 0..{logits.shape[-1] - 1}.")
    out = np.full(logits.shape, -np.inf)
    out[allowed] = logits[allowed]
    return out


def candidates(tokenizer, logits: np.ndarray, k: int = 15) -> list[dict]:
    """The k best tokens: rank, token text, id, logit and probability over the whole vocabulary."""
    logits = array("logits", logits, ndim=1)
    p = softmax(logits)
    top = top_indices(logits, k)
    return [{"rank": r, "token": text, "id": int(i), "logit": round(float(logits[i]), 3), "probability": float(p[i])}
            for r, (i, text) in enumerate(zip(top, tokens_text(tokenizer, top)), start=1)]



def first_answer_top(tokenizer, trace, k: int = 8) -> list[dict]:
    """The first answer step's k best tokens as Next token's "Top candidates" table has them (`candidates` over
    step 0's logits, softmax at T = 1 over all V), each labelled as it reads after the prompt: id, label (text as
    the page names it), text (decoded), probability. Empty for a run with no answer step."""
    if not len(trace.steps):
        return []
    top = candidates(tokenizer, trace.step_logits[0].astype(np.float64), k)  # (V,) logits of step 0
    return [{"id": c["id"], "label": continuation_label(tokenizer, trace.ids, c["id"]),
             "text": tokenizer.decode([c["id"]]), "probability": c["probability"]} for c in top]


def answer_confidence(step_logits: np.ndarray, chosen_ids) -> dict[str, np.ndarray]:
    """Per decode step: how sure the model was, and how likely the token it took.

    step_logits (S, V), chosen_ids (S,) ->
      prob     (S,) the chosen token's probability (softmax at T = 1, over all V)
      entropy  (S,) bits: -sum p log2 p of that distribution
      choices  (S,) effective number of choices 2^entropy
      rank     (S,) 1 = the chosen token was the favourite
    Worked example: logits log([0.5, 0.25, 0.25]), chosen 1 -> prob 0.25, entropy 1.5 bits,
    choices 2^1.5 = 2.83, rank 2.
    """
    x = array("step_logits", step_logits, ndim=2, min_len=0)  # (S, V)
    p = _softmax(x, axis=-1)  # (S, V)
    ids = np.asarray(token_ids("chosen_ids", chosen_ids, x.shape[1]), dtype=np.int64)  # (S,)
    if len(ids) != len(x):
        raise InputError("chosen_ids", f"must hold one id per step: {len(x)} steps, {len(ids)} ids.")
    rows = np.arange(len(ids))
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(p > 0, p * np.log2(p), 0.0)
    entropy = -plogp.sum(axis=-1)  # (S,)
    chosen = x[rows, ids]  # (S,)
    rank = 1 + (x > chosen[:, None]).sum(axis=-1)
    return {"prob": p[rows, ids], "entropy": entropy, "choices": 2.0 ** entropy, "rank": rank}
