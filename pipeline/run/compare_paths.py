"""The plain serving path and the captured run compared on one request, now: the captured run is a whole
trace (pipeline.run.trace), so this sits above the stages, beside it."""
from __future__ import annotations

import time
from dataclasses import replace

from pipeline.core.errors import InputError
from pipeline.core.timing import interleave
from pipeline.faster.fast_path import generate
from pipeline.model.decoders.plain import blocks_for, supports
from pipeline.model.interface import LanguageModel
from pipeline.run.trace import run_trace
from pipeline.stages.request import ChatRequest


def compare_with_captured(lm: LanguageModel, request: ChatRequest, steps: int = 16, repeats: int = 3,
                          max_prompt_tokens: int | None = None) -> dict:
    """Decode time per token of the plain path and of the captured run for the same request, measured
    now, interleaved (plain, captured, plain, ...), `repeats` times, the answer cut to `steps`
    tokens (or fewer, as the request asks): {"comparison": Comparison (a = plain, b = captured), "steps": ...}.
    A recorded TPOT next to a live one would compare two moments of a shared machine, not two paths."""
    steps = min(steps, request.options.max_new_tokens)
    short = replace(request, options=replace(request.options, max_new_tokens=steps))
    seen: dict[str, list[int]] = {}

    def captured() -> float:
        t = run_trace(short, lm, max_prompt_tokens)
        seen["captured"] = t.generated_token_ids
        return t.timings.tpot_s

    def plain() -> float:
        summary = generate(lm, short, max_prompt_tokens)
        seen["plain"] = summary.generated
        return summary.tpot_s

    if len(generate(lm, short, max_prompt_tokens).generated) < 3:
        raise InputError("max_new_tokens", "the answer ends after fewer than 3 tokens: there is no decode speed "
                                           "to compare (ask a question with a longer answer).")
    comparison = interleave(plain, captured, repeats)
    own_decoder = supports(lm.model)
    return {"comparison": comparison, "steps": len(seen["plain"]), "same_tokens": seen["plain"] == seen["captured"],
            "measured_at": time.time(), "own_decoder": own_decoder,
            "row_blocks": blocks_for(lm.device) if own_decoder else 0}
