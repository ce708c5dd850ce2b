"""A pass placed on the roofline: its FLOPs and bytes (costs.py) over its measured seconds give the
achieved FLOP/s and bytes/s, and their shares of this machine's two ceilings (ceilings.py). The verdict is
read from those shares, not assumed: the larger share is the ceiling the pass is pressing against, unless
both are far below their ceilings (under FAR_UNDER): then neither arithmetic nor memory sets the time, the
pass's fixed cost does (Python, kernel launches, a recording hook per layer): overhead-bound.

The third ceiling is measured, not computed: the fixed cost of a pass, what a pass at almost no work (one token,
nothing cached: pipeline.costs.plain_steps.fixed_cost) takes beyond what its own FLOPs and bytes need. Every pass of
this model pays it here. Given it, each pass is placed against all three, each share being the time that ceiling
accounts for over the time the pass took; a pass that spends most of its time (FIXED_HOLDS) on the fixed cost, more
than on its bytes or FLOPs, is fixed-cost-bound: less work would barely shorten it. On a GPU that is the
launch-bound regime (a step's thousand operations each launch a kernel: pipeline.costs.launches).

    place(prefill_cost(m, 40), 0.12).verdict(roof)          # 'compute-bound', 'memory-bound' or 'overhead-bound'
    place(decode_cost(m, 40), 0.04).verdict(roof, probe)    # ... or 'fixed-cost-bound', probe: the 1-token pass
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from pipeline.core.checks import integer
from pipeline.costs.ceilings import Ceilings
from pipeline.costs.pass_costs import PassCost, decode_cost, prefill_cost
from pipeline.model.interface import LanguageModel

COMPUTE, MEMORY, OVERHEAD, FIXED = "compute-bound", "memory-bound", "overhead-bound", "fixed-cost-bound"
FAR_UNDER = 0.25  # both shares below this: the ceilings explain under a quarter of the time
FIXED_HOLDS = 0.5  # the fixed cost of a pass is at least this share of a pass's time: it is what holds the pass
PREFILL_LENGTHS = (16, 64, 256)


@dataclass(frozen=True)
class Placed:
    label: str  # 'prefill (40 tokens)', 'decode step 3'
    cost: PassCost
    seconds: float

    @property
    def flops_per_s(self) -> float:
        return self.cost.flops / self.seconds

    @property
    def bytes_per_s(self) -> float:
        return self.cost.bytes / self.seconds

    def compute_share(self, roof: Ceilings) -> float:
        return self.flops_per_s / roof.flops_per_s

    def memory_share(self, roof: Ceilings) -> float:
        return self.bytes_per_s / roof.bytes_per_s

    def bound_s(self, roof: Ceilings) -> float:
        """The least time the two ceilings allow for this pass's FLOPs and bytes."""
        return max(self.cost.flops / roof.flops_per_s, self.cost.bytes / roof.bytes_per_s)

    def overhead_s(self, roof: Ceilings) -> float:
        """The time neither ceiling explains: measured minus the ceilings' bound (0 when at or past the bound)."""
        return max(0.0, self.seconds - self.bound_s(roof))

    def fixed_share(self, roof: Ceilings, fixed: "Placed") -> float:
        """The third ceiling's share: the fixed cost of a pass (what the pass at almost no work, `fixed`, takes
        beyond its own ceilings) over this pass's time."""
        return fixed.overhead_s(roof) / self.seconds

    def verdict(self, roof: Ceilings, fixed: "Placed | None" = None) -> str:
        """Compute- or memory-bound by the larger share; overhead-bound under FAR_UNDER on both. With `fixed` (the
        pass at almost no work, itself excluded): fixed-cost-bound when that cost is most of the pass's time and
        more than either other share."""
        compute, memory = self.compute_share(roof), self.memory_share(roof)
        if fixed is not None and fixed is not self:
            share = self.fixed_share(roof, fixed)
            if share >= FIXED_HOLDS and share >= max(compute, memory):
                return FIXED
        if max(compute, memory) < FAR_UNDER:
            return OVERHEAD
        return COMPUTE if compute >= memory else MEMORY

    def to_json(self, roof: Ceilings, fixed: "Placed | None" = None) -> dict:
        out = {"label": self.label, "seconds": self.seconds, "flops": self.cost.flops, "bytes": self.cost.bytes,
               "flops_per_s": self.flops_per_s, "bytes_per_s": self.bytes_per_s,
               "compute_share": self.compute_share(roof), "memory_share": self.memory_share(roof),
               "overhead_s": self.overhead_s(roof), "verdict": self.verdict(roof, fixed)}
        if fixed is not None and fixed is not self:
            out["fixed_share"] = self.fixed_share(roof, fixed)
        return out


def place(cost: PassCost, seconds: float, label: str = "") -> Placed:
    return Placed(label, cost, max(seconds, 1e-9))


def trace_points(trace) -> tuple[Placed, list[Placed]]:
    """A stored run's prefill pass and each decode step, with the run's own timings: Timings.prefill_s (the
    captured pass: hooks on, eager attention) and each later Step.seconds (one pass and the choosing)."""
    m, n = trace.dims, len(trace.ids)
    prefill = place(prefill_cost(m, n), trace.timings.prefill_s, f"prefill ({n} tokens), captured run")
    steps = [place(decode_cost(m, n + s.step - 1, s.batch_size), s.seconds,
                   f"decode step {s.step}, captured run")
             for s in trace.steps[1:]]  # step 0's token came from the prefill pass
    return prefill, steps


def prefill_curve(lm: LanguageModel, lengths=PREFILL_LENGTHS, repeats: int = 3) -> list[tuple[int, Placed, tuple]]:
    """Prefill of T tokens (one SDPA pass, no captures), lengths interleaved and repeated:
    [(T, placed at the median seconds, (low, high) seconds)]."""
    import time

    integer("repeats", repeats, 1, 100)
    ids = [(1000 + i) % lm.dims.V for i in range(max(lengths))]  # any token ids do: the work does not depend on them
    times: dict[int, list[float]] = {T: [] for T in lengths}
    for r in range(repeats):
        for T in lengths if r % 2 == 0 else lengths[::-1]:
            t0 = time.perf_counter()
            lm.forward([ids[:T]]).logits.float().cpu()  # .cpu() waits for a GPU
            times[T].append(time.perf_counter() - t0)
    return [(T, place(prefill_cost(lm.dims, T), statistics.median(ts), f"prefill {T} tokens"), (min(ts), max(ts)))
            for T, ts in times.items()]
