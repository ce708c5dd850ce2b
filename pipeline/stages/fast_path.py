"""The plain serving path beside the captured one: no hooks, no per-step candidate tables, SDPA,
the sampler on the model's own device, and decode steps run straight from the weights into a
preallocated K/V cache (pipeline.model.plain_decoder) rather than through HF's forward. Same
weights, same tokens (greedy is tested equal), so a page can put "captured: X ms/token" next to
"plain serving: Y ms/token" for the same request, and stream an answer live as it is produced.

    for event in stream(lm, request):     # {"delta": "The", "step": 0, "t_s": 0.41}, ...
        ...
"""
from __future__ import annotations

import time
from typing import Callable, Iterator

import numpy as np
import torch

from ..model.plain_decoder import blocks_for, open_decoder, supports
from .generation import StreamDetokenizer, end_token_ids
from .next_token import draw, final_probs
from ..errors import InputError
from .request import ChatRequest
from .tokens import tokenize_request
from ..model.interface import LanguageModel


def _choose(logits: torch.Tensor, options, rng) -> int:
    """Greedy on the device (one argmax); sampling through the same filters as the captured path."""
    if options.greedy:
        return int(torch.argmax(logits))
    return int(draw(final_probs(logits.float().cpu().numpy(), options), 1, rng)[0])


def stream(lm: LanguageModel, request: ChatRequest, max_prompt_tokens: int | None = None,
           on_event: Callable[[dict], None] | None = None) -> Iterator[dict]:
    """Yield text deltas as they are produced, then a final {'done': True, ...} summary."""
    from ..trace import check_fits

    t0 = time.perf_counter()
    ids = tokenize_request(lm.tokenizer, request).ids
    check_fits(lm.dims, len(ids), request.options.max_new_tokens, max_prompt_tokens)
    options, eos = request.options, end_token_ids(lm)
    rng = np.random.default_rng(options.seed)
    detok = StreamDetokenizer(lm.tokenizer, options.stop)
    decoder = open_decoder(lm, len(ids) + options.max_new_tokens)  # a static K/V cache sized for the request
    logits = decoder.prefill(ids)  # (V,)
    tokens, step_s, finish, t_prev = [], [], "length", time.perf_counter()
    for step in range(options.max_new_tokens):
        token = _choose(logits, options, rng)
        now = time.perf_counter()
        step_s.append(now - (t0 if step == 0 else t_prev))
        tokens.append(token)
        if token in eos:
            finish = "eos"
            break
        delta = detok.push(token)
        if delta:
            event = {"delta": delta, "step": step, "t_s": now - t0}
            if on_event:
                on_event(event)
            yield event
        if detok.stopped:
            finish = "stop"
            break
        if step + 1 == options.max_new_tokens:
            break
        t_prev = time.perf_counter()
        logits = decoder.step(token)  # (V,)
    tail = detok.flush()
    if tail:
        event = {"delta": tail, "step": len(tokens) - 1, "t_s": time.perf_counter() - t0}
        if on_event:
            on_event(event)
        yield event
    summary = {"done": True, "tokens": tokens, "text": detok.emitted, "finish_reason": finish,
               "ttft_s": step_s[0] if step_s else None,
               "tpot_s": float(np.mean(step_s[1:])) if len(step_s) > 1 else None, "prompt_tokens": len(ids)}
    if on_event:
        on_event(summary)
    yield summary


def generate(lm: LanguageModel, request: ChatRequest, max_prompt_tokens: int | None = None) -> dict:
    """The whole answer on the plain path: the final summary of `stream`."""
    *_, summary = stream(lm, request, max_prompt_tokens)
    return summary


def compare_with_captured(lm: LanguageModel, request: ChatRequest, steps: int = 16, repeats: int = 3,
                          max_prompt_tokens: int | None = None) -> dict:
    """Decode time per token of the plain path and of the captured run for the same request, measured
    now, interleaved (plain, captured, plain, ...), `repeats` times, the answer cut to `steps`
    tokens (or fewer, as the request asks): {"comparison": Comparison (a = plain, b = captured), "steps": ...}.
    A recorded TPOT next to a live one would compare two moments of a shared machine, not two paths."""
    from dataclasses import replace

    from ..timing import interleave
    from ..trace import run_trace

    steps = min(steps, request.options.max_new_tokens)
    short = replace(request, options=replace(request.options, max_new_tokens=steps))
    seen: dict[str, list[int]] = {}

    def captured() -> float:
        t = run_trace(short, lm, max_prompt_tokens)
        seen["captured"] = t.generated_token_ids
        return t.timings.tpot_s

    def plain() -> float:
        summary = generate(lm, short, max_prompt_tokens)
        seen["plain"] = summary["tokens"]
        return summary["tpot_s"]

    if len(generate(lm, short, max_prompt_tokens)["tokens"]) < 3:
        raise InputError("max_new_tokens", "the answer ends after fewer than 3 tokens: there is no decode speed "
                                           "to compare (ask a question with a longer answer).")
    comparison = interleave(plain, captured, repeats)
    own_decoder = supports(lm.model)
    return {"comparison": comparison, "steps": len(seen["plain"]), "same_tokens": seen["plain"] == seen["captured"],
            "measured_at": time.time(), "own_decoder": own_decoder,
            "row_blocks": blocks_for(lm.device) if own_decoder else 0}
