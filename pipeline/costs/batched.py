"""A plain batched decode: B prompts left-padded into one prefill pass, then one pass per step for all
of them, greedy (the measured sweep and the determinism check share it; nothing is recorded but what
they need). Row b's positions continue from its own length; padding is masked out of attention.
Not the queue's BatchDecoder on purpose: a measurement needs every row to run the same fixed number of steps
(no end token, no stop strings, no stream), one padded prefill for all rows, and row 0 teacher-forced for the
determinism check; BatchDecoder serves answers, each to its own end.

    rows = decode_rows(lm, [ids_a, ids_b], steps=8)   # rows.tokens (B, S), rows.step_seconds (S,)
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from pipeline.model.interface import LanguageModel
from pipeline.stages.request import ChatRequest

QUESTIONS = (  # the room's requests: real questions of different lengths (so batches are padded)
    "Are tomatoes fruit?", "Why is the sky blue?", "What is a prime number?",
    "How do bees make honey?", "Name three rivers in Africa.", "What does a compiler do?",
    "Why do we have seasons on Earth?", "How far away is the Moon?", "What is photosynthesis, in one sentence?",
    "Write a haiku about rain.", "What is the capital of Canada?", "How do vaccines work?",
    "Explain gravity to a child.", "What is the boiling point of water at sea level?",
    "Give me a synonym for happy.", "Why is the ocean salty?",
)


@dataclass
class Rows:
    tokens: np.ndarray  # (B, S) chosen (or forced) ids
    step_seconds: list[float]  # (S - 1,) one decode pass each (step 0's token comes from the prefill pass)
    prefill_seconds: float
    lengths: list[int]  # (B,) prompt lengths
    logits: np.ndarray | None  # (S, V) of row `keep_row`, when asked


def request_ids(lm: LanguageModel, n: int) -> list[list[int]]:
    """n real prompts in the model's chat format: the questions above, round and round."""
    from pipeline.stages.tokens import tokenize_request

    return [tokenize_request(lm.tokenizer, ChatRequest.from_question(QUESTIONS[i % len(QUESTIONS)])).ids
            for i in range(n)]


def decode_rows(lm: LanguageModel, prompts: list[list[int]], steps: int, force: list[int] | None = None,
                keep_row: int | None = None) -> Rows:
    """Greedy decode of every prompt together for `steps` tokens. force: row 0's tokens instead of its
    own choices (teacher forcing, so its logits can be compared step by step with another run's)."""
    import torch

    B, T = len(prompts), max(len(p) for p in prompts)
    pad = lm.tokenizer.pad_token_id or 0
    ids = [[pad] * (T - len(p)) + list(p) for p in prompts]  # (B, T) left-padded
    mask = torch.tensor([[0] * (T - len(p)) + [1] * len(p) for p in prompts], device=lm.device)  # (B, T) 1 = real
    positions = (mask.cumsum(1) - 1).clamp(min=0)  # each row counts from its own first real token
    lengths = [len(p) for p in prompts]
    t0 = time.perf_counter()
    out = lm.forward(ids, attention_mask=mask, position_ids=positions)
    logits = out.logits[:, -1]  # (B, V)
    tokens, kept, seconds = [], [], []
    chosen = logits.argmax(-1).tolist()  # .tolist() waits for a GPU: the pass is done
    prefill_s = time.perf_counter() - t0
    cache = out.cache
    for step in range(steps):
        if keep_row is not None:
            kept.append(logits[keep_row].float().cpu().numpy())
        if force is not None:
            chosen[0] = force[step]
        tokens.append(list(chosen))
        if step + 1 == steps:
            break
        mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype, device=mask.device)], dim=1)
        pos = torch.tensor([[n + step] for n in lengths], device=mask.device)  # (B, 1) each row's next position
        t0 = time.perf_counter()
        out = lm.forward([[t] for t in chosen], cache=cache, attention_mask=mask, position_ids=pos)
        logits = out.logits[:, -1]
        chosen = logits.argmax(-1).tolist()
        seconds.append(time.perf_counter() - t0)
        cache = out.cache
    return Rows(np.array(tokens, dtype=np.int64).T, seconds, prefill_s, lengths,
                np.stack(kept) if kept else None)
