"""The memory one training step needs, against what inference needs, and the check before a step starts.

A step holds four things at once (Rajbhandari et al. 2019, "ZeRO", §3.1; Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models", §4.1):

    weights      P * w                 (w bytes per parameter: 4 in float32, 2 in bf16)
    gradients    P * w                 one per weight
    optimizer    SGD: 0; Adam: 8 * P   (two float32 moments), + 4 * P for a float32 master copy when w < 4
                                       (mixed precision: 2 + 2 + 12 = ZeRO's 16 bytes per parameter)
    activations  L * T * D * 34 * w/2  (what backpropagation keeps per layer, 34 bytes per token and width
                                       in 16-bit without recomputation, attention by a fused kernel)
                 + T * V * 4 * 2       (the logits and their gradient in float32)

Inference holds the weights, the KV cache and one row of logits.

    SmolLM2-135M, float32, Adam: 4 + 4 + 8 = 16 bytes per parameter -> 2.2 GB before activations.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from pipeline.core.checks import integer, number
from pipeline.core.errors import InputError
from pipeline.model.dims import kv_bytes_formula

ACTIVATION_BYTES_16BIT = 34  # per layer, token and unit of width (Korthikanti et al. 2022, eq. 2 without the s^2 term)
ADAM_STATE_BYTES = 8  # two float32 moments per parameter
MASTER_COPY_BYTES = 4  # mixed precision keeps a float32 copy of the weights for the update
PROCESS_BYTES = 700 * 2**20  # the child's own Python, torch and transformers before any tensor (~0.5-0.7 GB measured)
OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class StepMemory:
    weights: int
    gradients: int
    optimizer: int
    activations: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations

    def parts(self) -> dict[str, int]:
        return {"weights": self.weights, "gradients": self.gradients, "optimizer states": self.optimizer,
                "activations": self.activations}


@dataclass(frozen=True)
class InferenceMemory:
    weights: int
    kv_cache: int
    logits: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.logits


def optimizer_bytes(params: int, optimizer: str, weight_bytes: float) -> int:
    if optimizer not in OPTIMIZERS:
        raise InputError("optimizer", f"must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}.")
    if optimizer == "sgd":  # plain SGD (no momentum) keeps nothing between steps
        return 0
    return int(params * (ADAM_STATE_BYTES + (MASTER_COPY_BYTES if weight_bytes < 4 else 0)))


def training_memory(params: int, layers: int, width: int, tokens: int, vocab: int | None, weight_bytes: float,
                    optimizer: str) -> StepMemory:
    """One step on one sequence of `tokens` tokens (batch 1). vocab None: logits not counted (unknown)."""
    params = integer("params", params, 0, 10**13)
    layers, width = integer("layers", layers, 1, 10**5), integer("width", width, 1, 10**6)
    tokens = integer("tokens", tokens, 1, 10**8)
    weight_bytes = number("weight_bytes", weight_bytes, 0.5, 8)
    weights = int(params * weight_bytes)
    activations = int(layers * tokens * width * ACTIVATION_BYTES_16BIT * weight_bytes / 2)
    if vocab:
        activations += tokens * integer("vocab", vocab, 1, 10**8) * 4 * 2
    return StepMemory(weights, weights, optimizer_bytes(params, optimizer, weight_bytes), activations)


def inference_memory(params: int, layers: int, kv_heads: int, head_dim: int, tokens: int, vocab: int | None,
                     weight_bytes: float, kv_tokens_per_layer: list[int] | None = None) -> InferenceMemory:
    """Weights, the KV cache of `tokens` positions (per layer when windows cut it: kv_tokens_per_layer) and
    one row of float32 logits."""
    weights = int(integer("params", params, 0, 10**13) * number("weight_bytes", weight_bytes, 0.5, 8))
    held = kv_tokens_per_layer if kv_tokens_per_layer is not None else [tokens] * layers
    kv = sum(kv_bytes_formula(1, kv_heads, head_dim, n, weight_bytes) for n in held)
    return InferenceMemory(weights, kv, (vocab or 0) * 4)


def available_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """Memory the system can give a new process now: MemAvailable of /proc/meminfo (a file without it: the free
    pages the system reports; None where unknown)."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def child_bytes(need: StepMemory) -> int:
    """What the child process holds at its peak: the step, its own process, and the weights file it loaded
    from, which stays mapped in its memory (Gemma-3-270M, Adam: 5.7 GiB estimated, 6.0 GiB peak measured;
    SmolLM2, SGD: 2.2 estimated, 1.7 measured)."""
    return need.total + PROCESS_BYTES + need.weights


def check_fits(need: StepMemory, available: int | None = None) -> int:
    """The bytes the child will take (child_bytes); refused with a message when more than what is available
    now. Returns the estimate."""
    total = child_bytes(need)
    available = available_bytes() if available is None else available
    if available is not None and total > available:
        parts = ", ".join(f"{k} {v / 2**30:.2f} GiB" for k, v in need.parts().items())
        raise InputError("memory", f"the training step needs about {total / 2**30:.2f} GiB ({parts}, "
                                   f"{PROCESS_BYTES / 2**30:.2f} GiB for its process and the weights file it "
                                   f"loads) but only "
                                   f"{available / 2**30:.2f} GiB are available now; try SGD (no optimizer states), "
                                   "a shorter sentence, or later.")
    return total
