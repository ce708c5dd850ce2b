"""Temperature 0 alone and inside a batch: the same greedy request decoded by itself, then as row 0 of a
padded batch with N other requests (longer ones, so its row is left-padded). The batched row is fed the
alone run's tokens (teacher forcing), so its logits can be compared at every step; a step where its own
greedy choice would differ is a flip, and the first flip is where the two answers would part.

Why they differ at all: a batched matmul may split and sum its inner products in another order than the
single-row one (floating-point addition is not associative), and the padded row's attention runs over a
longer, masked key axis. Kernels that give every row the same bits whatever the batch ("batch-invariant")
remove the first cause; on a GPU the check is the same run with the GPU's kernels (cuBLAS GEMMs split
differently by batch size; flash attention by sequence length).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipeline.core.checks import integer
from pipeline.costs.batched import decode_rows, request_ids
from pipeline.model.interface import LanguageModel


@dataclass(frozen=True)
class Flip:
    step: int
    alone_token: int
    batch_token: int
    gap_alone: float  # alone: the chosen token's logit minus the runner-up's (how close the tie was)
    gap_batch: float  # in the batch: its favourite's logit minus the alone choice's

    def to_json(self) -> dict:
        return {"step": self.step, "alone_token": self.alone_token, "batch_token": self.batch_token,
                "gap_alone": self.gap_alone, "gap_batch": self.gap_batch}


@dataclass(frozen=True)
class Determinism:
    batch_size: int  # the request and N others
    padding: int  # left-padding positions in the request's row
    device: str
    max_abs_logit_diff: float
    per_step: list[float]  # (S,) largest |alone - batch| over V at each step
    flips: list[Flip] = field(default_factory=list)
    alone_tokens: list[int] = field(default_factory=list)

    @property
    def flipped_steps(self) -> list[int]:
        return [f.step for f in self.flips]

    @property
    def parted_at(self) -> int | None:
        """The step where the two answers would part (the first flip), None if they never do."""
        return self.flips[0].step if self.flips else None

    def to_json(self) -> dict:
        return {"batch_size": self.batch_size, "padding": self.padding, "device": self.device,
                "max_abs_logit_diff": self.max_abs_logit_diff, "per_step_max_abs_logit_diff": self.per_step,
                "flipped_steps": self.flipped_steps, "flips": [f.to_json() for f in self.flips],
                "parted_at": self.parted_at}


def compare(alone: np.ndarray, batch: np.ndarray, tokens: list[int]) -> tuple[list[float], list[Flip]]:
    """alone, batch: (S, V) logits; tokens: the alone run's greedy choices (S,)."""
    diffs = np.abs(alone.astype(np.float64) - batch.astype(np.float64)).max(axis=1)
    flips = []
    for s, (a, b, t) in enumerate(zip(alone, batch, tokens)):
        mine = int(np.argmax(b))
        if mine != t:
            runner_up = float(np.partition(a, -2)[-2])
            flips.append(Flip(s, int(t), mine, float(a[t]) - runner_up, float(b[mine]) - float(b[t])))
    return [float(d) for d in diffs], flips


def determinism(lm: LanguageModel, others: int = 7, steps: int = 16) -> Determinism:
    integer("determinism", others, 1, 255)
    integer("steps", steps, 1, 1000)
    prompts = request_ids(lm, others + 1)
    mine = min(range(len(prompts)), key=lambda i: len(prompts[i]))  # the shortest: padded in the batch
    target = prompts.pop(mine)
    alone = decode_rows(lm, [target], steps, keep_row=0)
    tokens = [int(t) for t in alone.tokens[0]]
    batch = decode_rows(lm, [target] + prompts, steps, force=tokens, keep_row=0)
    per_step, flips = compare(alone.logits, batch.logits, tokens)
    return Determinism(others + 1, max(len(p) for p in prompts) - len(target) if prompts else 0, str(lm.device),
                       max(per_step), per_step, flips, tokens)
