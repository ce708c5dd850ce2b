"""What holds a placed pass back, in one plain sentence: the ceiling it presses against (compute, memory, or the
measured cost of a pass at almost no work: a 1-token pass with nothing cached, plain_steps.fixed_cost), or, far
under all three, its own path's overhead.

    regime_sentence(step, roof, probe)
    # 'decode step, plain path: 33% of the memory ceiling, 5% of compute, 72% in the fixed cost of a pass:
    #  fixed-cost-bound. A pass with almost nothing to compute (1-token pass, nothing cached) takes 41.7 ms here,
    #  28.7 ms of it neither memory nor arithmetic: that is the fixed cost every pass pays, and it is most of ...'
"""
from __future__ import annotations

from pipeline.costs.ceilings import Ceilings
from pipeline.costs.roofline import COMPUTE, FAR_UNDER, FIXED, MEMORY, Placed


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms" if seconds < 0.1 else f"{seconds * 1e3:,.0f} ms"


def regime_sentence(p: Placed, roof: Ceilings, fixed: Placed | None = None, path_cost: str = "") -> str:
    """The pass's shares of the ceilings, its regime and what sets its time. `fixed`: the pass at almost no work,
    measured (its fixed cost is the third ceiling: pipeline.costs.roofline); `path_cost`: what this pass's path
    adds, in words ('recording every layer's tensors'), said of an overhead-bound pass."""
    third = fixed is not None and fixed is not p
    shares = f"{p.memory_share(roof):.0%} of the memory ceiling, {p.compute_share(roof):.0%} of compute"
    if third:
        shares += f", {p.fixed_share(roof, fixed):.0%} in the fixed cost of a pass"
    verdict = p.verdict(roof, fixed)
    if verdict == MEMORY:
        return (f"{p.label}: {shares}: memory-bound; reading the weights and the cache sets its time "
                f"({_ms(p.seconds)}, the ceiling allows {_ms(p.bound_s(roof))}).")
    if verdict == COMPUTE:
        return (f"{p.label}: {shares}: compute-bound; the arithmetic sets its time "
                f"({_ms(p.seconds)}, the ceiling allows {_ms(p.bound_s(roof))}).")
    fixed_said = (f"A pass with almost nothing to compute ({fixed.label}) takes {_ms(fixed.seconds)} here, "
                  f"{_ms(fixed.overhead_s(roof))} of it neither memory nor arithmetic: that is the fixed cost every "
                  "pass pays" if third else "")
    if verdict == FIXED:
        return (f"{p.label}: {shares}: fixed-cost-bound. {fixed_said}, and it is most of this pass's "
                f"{_ms(p.seconds)}. Less work would barely shorten it; a cheaper pass would (fewer separate "
                "operations, or on a GPU all of them launched at once as one CUDA graph).")
    said = (f"{p.label}: {shares}: overhead-bound (memory and compute both under {FAR_UNDER:.0%}). Its bytes "
            f"and FLOPs need {_ms(p.bound_s(roof))} at the ceilings; it took {_ms(p.seconds)}, so "
            f"{_ms(p.overhead_s(roof))} is neither memory nor arithmetic.")
    if third:
        said += (f" {fixed_said}; the rest is " + (f"this path's own ({path_cost})." if path_cost else
                                                   "this path's own."))
    elif path_cost:
        said += f" On this path that is {path_cost}."
    return said


def operations_sentence(fixed: Placed, operations: int, layers: int) -> str:
    """Where a pass's fixed cost goes: the count of operations it runs (pipeline.costs.launches) and their mean."""
    return (f"The pass at almost no work ({fixed.label}) runs {operations:,} separate operations "
            f"({operations / layers:,.0f} a layer), {fixed.seconds / operations * 1e6:,.0f} µs each on average. "
            "Each is dispatched on its own however little it computes (on a GPU, each is a kernel launch of its "
            "own), so a pass's fixed cost follows the number of layers, not their width.")


def above_a_ceiling(points: list[Placed], roof: Ceilings) -> list[Placed]:
    """The passes measured faster than a ceiling allows: the ceilings were measured at a busier moment."""
    return [p for p in points if max(p.compute_share(roof), p.memory_share(roof)) > 1.05]
