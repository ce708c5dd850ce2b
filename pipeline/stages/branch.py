"""What if it had picked another token: the answer continued from any step with a token of your
choosing (branch and rewind).

The prompt is not run again. Its keys and values come back from the captured prefill (k_rot and
v are exactly what the KV cache held), the answer's tokens before the branch point are fed in one
pass, the chosen token is forced at its step, and decoding goes on with the run's own options (a
sampled run keeps its random sequence, so only the forced choice differs).
"""
from __future__ import annotations

import time

import numpy as np
import torch

from pipeline.core.errors import InputError
from pipeline.model.hf_imports import transformers_names
from pipeline.model.interface import LanguageModel
from pipeline.model.kv_tensors import cache_len, held_positions
from pipeline.stages.decode_record import Decode
from pipeline.stages.generation import Answer, continue_answer

DynamicCache, = transformers_names("DynamicCache")


def cache_from_prefill(lm: LanguageModel, prefill) -> DynamicCache:
    """The prompt's KV cache rebuilt from the capture: per layer (1, Hkv, T, Dh) keys and values."""
    dtype = lm.model.dtype
    layers = []
    for i, block in enumerate(lm.model.model.layers):
        device = block.self_attn.k_proj.weight.device
        k = torch.from_numpy(np.ascontiguousarray(prefill.k_rot[i]))[None].to(device, dtype)  # (1, Hkv, T, Dh)
        v = torch.from_numpy(np.ascontiguousarray(prefill.v[i]))[None].to(device, dtype)
        layers.append((k, v))
    return DynamicCache(ddp_cache_data=layers, config=lm.config)


def branch_decode(lm: LanguageModel, trace, step: int, token_id: int, rid: str) -> tuple[Decode, int]:
    """Decode again from `step` with `token_id` forced there. Returns (decode, positions in the cut cache
    just before the forced token was fed: prompt + the answer's tokens before `step`)."""
    if not isinstance(step, (int, np.integer)) or not 0 <= step < len(trace.steps):
        raise InputError("step", f"must be a step of the run, 0 to {len(trace.steps) - 1}, got {step!r}.")
    if not isinstance(token_id, (int, np.integer)) or not 0 <= token_id < trace.dims.V:
        raise InputError("token_id", f"must be a token id from 0 to {trace.dims.V - 1}, got {token_id!r}.")
    T = len(trace.ids)
    d = trace.dims
    per_position = 2 * d.Hkv * d.Dh * d.bytes_per_value  # K and V of one position in one layer
    held = lambda n: [per_position * held_positions(d.window(i), n) for i in range(d.L)]  # noqa: E731
    answer = Answer(lm, torch.from_numpy(trace.step_logits[0]), trace.request.options, rid, time.perf_counter(),
                     force={step: int(token_id)}, prompt_ids=trace.ids)
    for i in range(step):  # replay the steps before the branch from the stored scores: same tokens, no model
        answer.fed(trace.step_logits[i].astype(np.float64))
        answer.choose(T + i, held(T + i))
    kv_cache = cache_from_prefill(lm, trace.prefill)
    before = trace.generated_token_ids[:step]
    if before:  # the answer so far, fed once: the cache now holds prompt + these tokens
        answer.fed(lm.forward([before], cache=kv_cache).logits[0, -1])
    else:
        answer.fed(trace.step_logits[0].astype(np.float64))
    cut = cache_len(kv_cache)
    answer.t_prev = time.perf_counter()
    return continue_answer(lm, kv_cache, answer), cut
