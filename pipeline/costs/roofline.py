"""A pass placed on the roofline: its FLOPs and bytes (pass_costs.py) over its measured seconds give the
achieved FLOP/s and bytes/s, and their shares of this machine's two ceilings (ceilings.py). The verdict is
read from those shares, not assumed: the larger share is the ceiling the pass is pressing against, unless
both are far below their ceilings (under FAR_UNDER): then neither arithmetic nor memory sets the time, the
pass's fixed cost does (Python, kernel launches, a recording hook per layer): overhead-bound.

    place(prefill_cost(m, 40), 0.12).verdict(roof)   # 'compute-bound', 'memory-bound' or 'overhead-bound'
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from pipeline.core.checks import integer
from pipeline.costs.ceilings import Ceilings
from pipeline.costs.pass_costs import PassCost, decode_cost, prefill_cost
from pipeline.model.interface import LanguageModel

COMPUTE, MEMORY, OVERHEAD = "compute-bound", "memory-bound", "overhead-bound"
FAR_UNDER = 0.25  # both shares below this: the ceilings explain under a quarter of the time
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

    def verdict(self, roof: Ceilings) -> str:
        compute, memory = self.compute_share(roof), self.memory_share(roof)
        if max(compute, memory) < FAR_UNDER:
            return OVERHEAD
        return COMPUTE if compute >= memory else MEMORY

    def to_json(self, roof: Ceilings) -> dict:
        return {"label": self.label, "seconds": self.seconds, "flops": self.cost.flops, "bytes": self.cost.bytes,
                "flops_per_s": self.flops_per_s, "bytes_per_s": self.bytes_per_s,
                "compute_share": self.compute_share(roof), "memory_share": self.memory_share(roof),
                "overhead_s": self.overhead_s(roof), "verdict": self.verdict(roof)}


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
