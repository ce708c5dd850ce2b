"""What holds a placed pass back, in one plain sentence: the ceiling it presses against, or, far under both, the
fixed cost of a pass on this machine (measured: a 1-token pass with nothing cached, plain_steps.fixed_cost).

    regime_sentence(step, roof, probe)
    # 'decode step, captured run: 8 % of the memory ceiling, 1 % of compute: overhead-bound. The ceilings allow
    #  14 ms for its bytes and FLOPs; it took 175 ms. ...'
"""
from __future__ import annotations

from pipeline.costs.ceilings import Ceilings
from pipeline.costs.roofline import COMPUTE, FAR_UNDER, MEMORY, Placed


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms" if seconds < 0.1 else f"{seconds * 1e3:,.0f} ms"


def regime_sentence(p: Placed, roof: Ceilings, fixed: Placed | None = None, path_cost: str = "") -> str:
    """The pass's shares, its regime, and for an overhead-bound pass what the overhead is here: what a pass at
    almost no work (`fixed`) pays beyond its ceilings, and what this pass pays beyond that: its own path's
    (`path_cost`, in words: 'recording every layer's tensors')."""
    shares = f"{p.memory_share(roof):.0%} of the memory ceiling, {p.compute_share(roof):.0%} of compute"
    verdict = p.verdict(roof)
    if verdict == MEMORY:
        return (f"{p.label}: {shares}: memory-bound; reading the weights and the cache sets its time "
                f"({_ms(p.seconds)}, the ceiling allows {_ms(p.bound_s(roof))}).")
    if verdict == COMPUTE:
        return (f"{p.label}: {shares}: compute-bound; the arithmetic sets its time "
                f"({_ms(p.seconds)}, the ceiling allows {_ms(p.bound_s(roof))}).")
    said = (f"{p.label}: {shares}, both under {FAR_UNDER:.0%}: overhead-bound. Its bytes and FLOPs need "
            f"{_ms(p.bound_s(roof))} at the ceilings; it took {_ms(p.seconds)}, so {_ms(p.overhead_s(roof))} is "
            "neither memory nor arithmetic but the cost of running the pass.")
    if fixed is not None:
        fixed_over = fixed.overhead_s(roof)
        said += (f" Here a pass at almost no work ({fixed.label}) takes {_ms(fixed.seconds)}, {_ms(fixed_over)} of "
                 "it beyond its ceilings: the framework's many small operations per layer, whatever the work.")
        if p.overhead_s(roof) > 1.5 * fixed_over:
            said += (f" This pass pays {_ms(p.overhead_s(roof) - fixed_over)} more than that: "
                     + (f"this path's own ({path_cost})." if path_cost else "this path's own."))
    elif path_cost:
        said += f" On this path that is {path_cost}."
    return said


def above_a_ceiling(points: list[Placed], roof: Ceilings) -> list[Placed]:
    """The passes measured faster than a ceiling allows: the ceilings were measured at a busier moment."""
    return [p for p in points if max(p.compute_share(roof), p.memory_share(roof)) > 1.05]


def operations_sentence(fixed: Placed, operations: int, layers: int, roof: Ceilings | None) -> str:
    """What the pass at almost no work runs: its count of operations (pipeline.costs.launches), per layer, and
    with the ceilings the time beyond its bytes and FLOPs shared out over them."""
    said = (f"The pass at almost no work ({fixed.label}) runs {operations:,} separate operations "
            f"({operations / layers:,.0f} a layer × {layers} layers).")
    if roof is not None and fixed.overhead_s(roof) > 0:
        said += (f" Of its {_ms(fixed.seconds)}, {_ms(fixed.overhead_s(roof))} is neither memory nor arithmetic: "
                 f"about {fixed.overhead_s(roof) / operations * 1e6:,.0f} µs for each operation.")
    return said + (" Each is dispatched on its own however little it computes (on a GPU, each is a kernel launch "
                   "of its own), so that cost grows with the count of operations, not with the model's width.")
