"""Everything the serving command measures, as one plain JSON-ready dict (the CLI prints and writes it)."""
from __future__ import annotations

from pipeline.costs.ceilings import ceilings
from pipeline.costs.named_time import BATCHED, PATH_NAMES
from pipeline.costs.plain_steps import fixed_cost
from pipeline.costs.roofline import PREFILL_LENGTHS, place, prefill_curve
from pipeline.costs.sweep import bend, sweep
from pipeline.model.interface import LanguageModel


def measure_all(lm: LanguageModel, sizes, steps: int = 8, repeats: int = 3, determinism_n: int | None = None,
                refresh: bool = False, prefill_lengths=PREFILL_LENGTHS) -> dict:
    roof = ceilings(lm.dims, lm.device, refresh=refresh)
    prefill = prefill_curve(lm, prefill_lengths, repeats)
    points = sweep(lm, sizes, steps, repeats, roof)
    first = points[0]  # the smallest batch: B = 1 unless told otherwise
    knee = bend(points)
    probe = fixed_cost(lm)
    report = {
        "model": lm.name, "device": roof.device,
        "ceilings": roof.to_json(),
        "prefill": [dict(placed.to_json(roof), tokens=T, tokens_per_s=T / placed.seconds, seconds_range=list(r))
                    for T, placed, r in prefill],
        "decode": dict(place(first.cost, first.step_s,
                             f"decode step, {PATH_NAMES[BATCHED]}, B = {first.batch_size}").to_json(roof),
                       batch_size=first.batch_size, past=first.past,
                       flops_per_token=first.cost.flops / first.batch_size,
                       bytes_per_token=first.cost.bytes / first.batch_size),
        "sweep": [p.to_json() for p in points],
        "bend": None if knee is None else knee.batch_size,
        "fixed_cost": dict(probe.placed.to_json(roof), runs_s=list(probe.runs),  # a pass at almost no work
                           operations=probe.operations.total, operations_by_name=probe.operations.by_name),
    }
    if determinism_n is not None:
        from pipeline.costs.determinism import determinism

        report["determinism"] = determinism(lm, determinism_n, steps).to_json()
    return report
