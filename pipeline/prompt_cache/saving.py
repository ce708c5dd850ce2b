"""What a run's reuse saved, measured: the one definition of the figure Generation and Prompt caching show.

The run's captured prefill is timed again now in two ways, interleaved (reused, uncached, reused, ...) and repeated:
over the K/V of its reused positions (those of its own record: the same tensors the prefix cache gave it), running
only the rest, and the same prompt with nothing reused. Medians with their ranges; a result where the reused side
comes out slower is measured again and marked noise (pipeline.core.timing.interleave_less_work). Both sides ran on
the captured path, as the run's own prefill did, so the figure is named "prefill pass (captured run)".

    saving = reuse_saving(lm, trace)      # None when the run reused nothing (the same work twice: nothing to time)
    saving.reused.shown, saving.uncached.shown, saving.timing.verdict("reused", "uncached")
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from pipeline.core.timing import Comparison, interleave_less_work
from pipeline.costs.named_time import CAPTURED, NamedTime
from pipeline.model.interface import LanguageModel

TIMING_REPEATS = 3  # interleaved reused / uncached pairs
QUANTITY = "prefill pass"


@dataclass(frozen=True)
class ReuseSaving:
    reused_positions: int  # positions the run reused
    prompt_positions: int  # all its prompt's positions
    timing: Comparison  # a: the prefill over the reused K/V (the rest only), b: the same prompt uncached
    measured_at: float  # time.time()

    @property
    def reused(self) -> NamedTime:
        """The prefill that ran only the positions after the reused ones (median and range)."""
        c = self.timing
        return NamedTime(QUANTITY, CAPTURED, c.a_median, *c.a_range)

    @property
    def uncached(self) -> NamedTime:
        """The same prompt's prefill with nothing reused (median and range)."""
        c = self.timing
        return NamedTime(QUANTITY, CAPTURED, c.b_median, *c.b_range)

    @property
    def saved_s(self) -> float:
        """Median uncached minus median reused (negative only when the measurement is noise)."""
        return self.timing.b_median - self.timing.a_median


def reuse_saving(lm: LanguageModel, trace, repeats: int = TIMING_REPEATS) -> ReuseSaving | None:
    """The run's captured prefill over its reused positions against the same prompt uncached, interleaved and
    repeated, timed now on `lm` (the run's model). trace: a Trace (pipeline.run.record) whose `reused_positions`
    are its first ones. None when it reused nothing."""
    import torch

    from pipeline.model.kv_tensors import cache_of
    from pipeline.model.past import Past, captures_at
    from pipeline.model.prefill import run_prefill

    n, ids, p = trace.reused_positions, list(trace.ids), trace.prefill
    if not n:
        return None
    device, dtype = lm.device, next(lm.model.parameters()).dtype
    kept = [captures_at(p, 0, n)]  # the captures kept with the blocks: made once, as the real path keeps them

    def reused() -> float:
        t0 = time.perf_counter()
        layers = [(torch.from_numpy(p.k_rot[i][None, :, :n]).to(device, dtype),
                   torch.from_numpy(p.v[i][None, :, :n]).to(device, dtype)) for i in range(p.k_rot.shape[0])]
        run_prefill(lm, ids, past=Past(n, cache_of(layers, lm.config), kept))
        return time.perf_counter() - t0

    def uncached() -> float:
        t0 = time.perf_counter()
        run_prefill(lm, ids)
        return time.perf_counter() - t0

    uncached()  # one untimed pass first: the first timed one would pay for warming up
    return ReuseSaving(n, len(ids), interleave_less_work(reused, uncached, repeats), time.time())
