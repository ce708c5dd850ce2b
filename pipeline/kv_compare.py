"""KV cache on vs off, measured: N greedy decode steps both ways on the real model.

With the cache, each step feeds only the newest token and reuses the stored K and V.
Without it, each step runs the whole sequence (prompt + everything generated so far) again.
Both runs pick the same tokens; only the time differs.
"""
from __future__ import annotations

import time

import torch


def _forward(lm, input_ids: torch.Tensor, cache=None, use_cache: bool = True):
    with torch.inference_mode(), lm.lock:
        out = lm.model(input_ids=input_ids.to(lm.device), cache=cache, use_cache=use_cache, logits_to_keep=1)
        lm.calls += 1
    return out


def with_cache(lm, ids: list[int], n_steps: int) -> dict:
    """Step 0 is the prefill of the prompt; steps 1.. feed one token each (input (1, 1))."""
    tokens, seconds, fed = [], [], []
    t0 = time.perf_counter()
    out = _forward(lm, torch.tensor([ids]))  # (1, T)
    seconds.append(time.perf_counter() - t0)
    fed.append(len(ids))
    cache = out.cache
    tokens.append(int(out.logits[0, -1].argmax()))
    for _ in range(n_steps - 1):
        t0 = time.perf_counter()
        out = _forward(lm, torch.tensor([[tokens[-1]]]), cache=cache)  # (1, 1)
        seconds.append(time.perf_counter() - t0)
        fed.append(1)
        tokens.append(int(out.logits[0, -1].argmax()))
    return {"tokens": tokens, "seconds": seconds, "tokens_fed": fed}


def without_cache(lm, ids: list[int], n_steps: int) -> dict:
    """Every step recomputes the whole sequence so far (input (1, T + step))."""
    tokens, seconds, fed = [], [], []
    for _ in range(n_steps):
        seq = list(ids) + tokens
        t0 = time.perf_counter()
        out = _forward(lm, torch.tensor([seq]), use_cache=False)
        seconds.append(time.perf_counter() - t0)
        fed.append(len(seq))
        tokens.append(int(out.logits[0, -1].argmax()))
    return {"tokens": tokens, "seconds": seconds, "tokens_fed": fed}


def compare(lm, ids: list[int], n_steps: int = 16) -> dict:
    """{'cache': {...}, 'no_cache': {...}, 'same_tokens': bool, 'speedup': float}"""
    on, off = with_cache(lm, ids, n_steps), without_cache(lm, ids, n_steps)
    return {"cache": on, "no_cache": off, "same_tokens": on["tokens"] == off["tokens"],
            "speedup": sum(off["seconds"]) / max(sum(on["seconds"]), 1e-9), "n_steps": n_steps,
            "prompt_tokens": len(ids)}
