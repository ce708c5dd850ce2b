"""A kind of request that takes at most a share of the model's time while other kinds are in the batch.

The API's streams (the "api" kind, a StreamEngine) each step on a decoder of their own: one pass per stream per step,
where the pages' requests (the "trace" engine) share one batched pass. Eight streamed API answers beside a room's
learners made every learner's step ~2.5x as long. With a share s, the kind's step is skipped while it owes the
others time: each of its steps (and prefills) of c seconds, taken while another kind is in the batch, owes the
others c (1 - s) / s seconds of theirs first. s = 1/4: the learners' steps grow by a third at most; the streams
still move, and alone in the batch they step every time (nothing is owed to nobody).

    shares = KindShares({"api": 0.25})
    shares.may_step("api", {"trace", "api"})   # -> True; then it steps for 0.2 s:
    shares.ran("api", 0.2, {"trace", "api"})   # owes 0.6 s: may_step -> False until "trace" ran 0.6 s
"""
from __future__ import annotations

from typing import Iterable


class KindShares:
    def __init__(self, shares: dict[str, float]):
        for kind, share in shares.items():
            if not 0 < share <= 1:
                raise ValueError(f"the share of {kind!r} must be in (0, 1], got {share!r}")
        self.shares = dict(shares)
        self.owed = {kind: 0.0 for kind in shares}  # seconds the other kinds run before the kind's next step

    def may_step(self, kind: str, in_batch: Iterable[str]) -> bool:
        """Whether `kind` steps now, with the kinds `in_batch` holding requests."""
        if kind not in self.shares or not any(k != kind for k in in_batch):
            return True
        return self.owed[kind] <= 1e-9  # paid, up to the sums' rounding

    def ran(self, kind: str, seconds: float, in_batch: Iterable[str]) -> None:
        """`kind` used the model for `seconds` (a step of its requests, or their prefills) with `in_batch` holding
        requests: a kind with a share owes that time to the others; the others' time pays the debts of the rest."""
        in_batch = set(in_batch)
        for k, share in self.shares.items():
            if k == kind:
                alone = not any(other != kind for other in in_batch)
                self.owed[k] = 0.0 if alone else self.owed[k] + seconds * (1 - share) / share
            else:
                self.owed[k] = max(0.0, self.owed[k] - seconds)
