"""One real optimizer step on a copy of the weights, in a child process.

The app's model is shared by every session, so it is never trained: `run_step` checks the memory a
step needs (pipeline.training.memory), then starts `python -m pipeline.training.worker`, which loads
its own copy of the weights from the weights cache (on the CPU), and calls `take_step` there:

    before  one pass: each target token's log-probability, on the sentence and on an unrelated one
    step    loss = mean -logprob (HF's `labels=ids`), backward, one SGD or Adam step
    after   the same two passes again, with the changed weights

The child exits and its copy is gone; the parent's weights are never touched.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from pipeline.core.errors import InputError
from pipeline.training.memory import OPTIMIZERS, check_fits, training_memory

LR_RANGE = (1e-7, 1.0)  # a learning rate outside this either changes nothing visible or wrecks every weight
DEFAULT_LR = {"sgd": 0.01, "adam": 1e-4}
WORKER_TIMEOUT_S = 600  # loading a copy and one step take ~5-20 s here; past this the child is killed
WORKER = "pipeline.training.worker"
ROOT = Path(__file__).resolve().parents[2]


def check_step_options(optimizer: str, lr) -> tuple[str, float]:
    if optimizer not in OPTIMIZERS:
        raise InputError("optimizer", f"must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}.")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) \
            or not LR_RANGE[0] <= lr <= LR_RANGE[1]:
        raise InputError("learning_rate", f"must be a number from {LR_RANGE[0]:g} to {LR_RANGE[1]:g}, got {lr!r}.")
    return optimizer, float(lr)


def part_of(name: str) -> str:
    """Where a parameter sits: 'model.layers.3.mlp.up_proj.weight' -> 'layer 3'; the embeddings, final norm,
    head."""
    pieces = name.split(".")
    if "layers" in pieces:
        i = pieces.index("layers")
        if i + 1 < len(pieces) and pieces[i + 1].isdigit():
            return f"layer {pieces[i + 1]}"
    if "embed_tokens" in name:
        return "embeddings"
    if "lm_head" in name:
        return "head"
    return "final norm" if "norm" in name else name


def take_step(model, ids: list[int], other_ids: list[int], optimizer: str, lr: float) -> dict:
    """One step of `optimizer` on `model` itself (give it a copy) on ids; log-probs before and after."""
    import torch

    from pipeline.training.score import score_logits

    optimizer, lr = check_step_options(optimizer, lr)
    device = next(model.parameters()).device  # the ids go where the weights are (a GPU when there is one)
    model.eval()  # these models have no dropout; eval mode keeps before and after comparable

    def logprobs(seq: list[int]) -> list[float]:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([seq], device=device), use_cache=False).logits[0]  # (T, V)
        return score_logits(logits, seq).logprobs[1:]

    before, other_before = logprobs(ids), logprobs(other_ids)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=lr) if optimizer == "sgd" else torch.optim.Adam(params, lr=lr)
    model.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    batch = torch.tensor([ids], device=device)
    loss = model(input_ids=batch, labels=batch, use_cache=False).loss
    loss.backward()
    norms: dict[str, float] = {}
    for name, p in model.named_parameters():  # tied weights appear once (named_parameters removes duplicates)
        if p.grad is not None:
            part = part_of(name)
            norms[part] = norms.get(part, 0.0) + float(p.grad.float().pow(2).sum())
    opt.step()
    step_s = time.perf_counter() - t0
    return {"optimizer": optimizer, "lr": lr, "loss": loss.item(), "step_s": step_s,
            "logprobs_before": before, "logprobs_after": logprobs(ids),
            "other_before": other_before, "other_after": logprobs(other_ids),
            "grad_norms": {k: math.sqrt(v) for k, v in norms.items()},
            "grad_norm": math.sqrt(sum(norms.values()))}


def step_memory(params: int, dims, tokens: int, optimizer: str):
    """What the child's step takes: float32 weights on the CPU, the longer of the two sentences."""
    return training_memory(params, dims.L, dims.D, tokens, dims.V, 4, optimizer)


def run_step(model_key: str, ids: list[int], other_ids: list[int], optimizer: str, lr: float, params: int, dims,
             available: int | None = None, timeout_s: float = WORKER_TIMEOUT_S) -> dict:
    """The step in a child process on its own copy of `model_key`'s weights, after the memory check.
    params, dims: the model's parameter count and ModelDims (for the estimate). Adds `seconds` (the whole
    child: start, load, step) and `estimate_bytes` to the worker's result."""
    optimizer, lr = check_step_options(optimizer, lr)
    for field, seq in (("sentence", ids), ("other", other_ids)):
        if len(seq) < 2:
            raise InputError(field, "needs at least two tokens (one to read, one to guess).")
        if len(seq) > dims.context_window:
            raise InputError(field, f"is {len(seq):,} tokens; at most {dims.context_window:,} fit.")
    estimate = check_fits(step_memory(params, dims, max(len(ids), len(other_ids)), optimizer), available)
    job = {"model": model_key, "ids": list(ids), "other_ids": list(other_ids), "optimizer": optimizer, "lr": lr}
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}  # the copy: on the CPU
    t0 = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", WORKER], input=json.dumps(job), capture_output=True, text=True,
                              timeout=timeout_s, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        raise InputError("training_step", f"the step took more than {timeout_s:.0f} s and was stopped.") from None
    seconds = time.perf_counter() - t0
    lines = done.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        result = None
    if not isinstance(result, dict):
        tail = done.stderr.strip()[-800:]
        raise RuntimeError(f"the training worker failed (exit {done.returncode}): {tail}")
    if "error" in result:
        raise InputError(result["error"]["field"], result["error"]["message"])
    return {**result, "seconds": seconds, "estimate_bytes": estimate}
