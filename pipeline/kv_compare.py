"""KV cache on vs off, measured: N greedy decode steps both ways on the real model.

With the cache, each step feeds only the newest token and reuses the stored K and V.
Without it, each step runs the whole sequence (prompt + everything generated so far) again.
Both runs pick the same tokens; only the time differs.
"""
from __future__ import annotations

import time

import torch


def _forward(lm, input_ids: torch.Tensor, cache=None, use_cache: bool = True):
    """One timed pass. Returns (output, chosen token, seconds); reading the token waits for the GPU."""
    with torch.inference_mode(), lm.lock:
        t0 = time.perf_counter()
        out = lm.model(input_ids=input_ids.to(lm.device), cache=cache, use_cache=use_cache, logits_to_keep=1)
        token = int(out.logits[0, -1].argmax())  # a GPU sync: the time covers the real work
        seconds = time.perf_counter() - t0
        lm.calls += 1
    return out, token, seconds


def with_cache(lm, ids: list[int], n_steps: int) -> dict:
    """Step 0 is the prefill of the prompt; steps 1.. feed one token each (input (1, 1))."""
    run = {"tokens": [], "seconds": [], "tokens_fed": []}
    cache = None
    for step in range(n_steps):
        fed = torch.tensor([ids]) if step == 0 else torch.tensor([[run["tokens"][-1]]])  # (1, T) then (1, 1)
        out, token, took = _forward(lm, fed, cache=cache)
        cache = out.cache
        _record(run, token, took, fed.shape[1])
    return run


def without_cache(lm, ids: list[int], n_steps: int) -> dict:
    """Every step recomputes the whole sequence so far (input (1, T + step))."""
    run = {"tokens": [], "seconds": [], "tokens_fed": []}
    for _ in range(n_steps):
        fed = torch.tensor([list(ids) + run["tokens"]])  # (1, T + step)
        _, token, took = _forward(lm, fed, use_cache=False)
        _record(run, token, took, fed.shape[1])
    return run


def _record(run: dict, token: int, seconds: float, n_fed: int) -> None:
    run["tokens"].append(token)
    run["seconds"].append(seconds)
    run["tokens_fed"].append(n_fed)


def compare(lm, ids: list[int], n_steps: int = 16) -> dict:
    """{'cache': {...}, 'no_cache': {...}, 'same_tokens': bool, 'speedup': float}"""
    on, off = with_cache(lm, ids, n_steps), without_cache(lm, ids, n_steps)
    return {"cache": on, "no_cache": off, "same_tokens": on["tokens"] == off["tokens"],
            "speedup": sum(off["seconds"]) / max(sum(on["seconds"]), 1e-9), "n_steps": n_steps,
            "prompt_tokens": len(ids)}
