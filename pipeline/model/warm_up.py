"""A model's first-call set-up, done before any request: on CUDA the first forward pass creates the context's
cuBLAS handles and loads every kernel it launches (hundreds of ms, once per process), on a CPU the math libraries
set up their own pools. Done here, that time is the process's start-up, and a first request's TTFT is its own.

    warm_up(lm)     # the CLI, before its request (its start-up = the load and this)
    warm_cuda(lm)   # a server as it starts: the same on CUDA, nothing on a CPU
"""
from __future__ import annotations

from pipeline.model.interface import LanguageModel


def warm_up(lm: LanguageModel) -> None:
    """One one-token forward pass through the network (not counted as a request's pass), waited for."""
    import torch

    with lm.lock, torch.inference_mode():
        lm.model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=lm.device))
        if lm.device.type == "cuda":
            torch.cuda.synchronize(lm.device)


def warm_cuda(lm: LanguageModel) -> bool:
    """warm_up where the model is on a CUDA device; nothing on a CPU. Whether it ran."""
    if lm.device.type != "cuda":
        return False
    warm_up(lm)
    return True
