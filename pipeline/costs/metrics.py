"""The four numbers a serving team watches, for the room now, from the finished runs the server holds:

- TTFT (time to first token): arrival -> first token chosen (queue wait and prefill);
- TPOT (time per output token): the mean gap between tokens once the stream has started (decode);
- end-to-end latency: arrival -> last token;
- throughput: output tokens per second of the model's busy time. A run decoded in a batch of B shared
  its steps with B - 1 others, so it is given 1/B of its time (the batch size of each step is recorded).

Each as the median and the 95th percentile over the runs (nearest rank: with 3 runs, p95 is the largest), over
runs served the same way only (room_metrics_by_path): TTFT and TPOT are each run's own, as recorded on it
(pipeline.costs.named_time.served_times), named by the paths that ran it.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from pipeline.costs.named_time import ServedAs, grouped_by_serving, time_label


@dataclass(frozen=True)
class Spread:
    p50: float
    p95: float
    n: int


@dataclass(frozen=True)
class RoomMetrics:
    runs: int
    ttft_s: Spread | None
    tpot_s: Spread | None
    e2e_s: Spread | None
    throughput_tokens_per_s: float | None  # output tokens / model-busy seconds (shared steps divided)
    output_tokens: int

    def to_json(self) -> dict:
        spread = lambda s: None if s is None else {"p50": s.p50, "p95": s.p95, "n": s.n}  # noqa: E731
        return {"runs": self.runs, "ttft_s": spread(self.ttft_s), "tpot_s": spread(self.tpot_s),
                "e2e_s": spread(self.e2e_s), "throughput_tokens_per_s": self.throughput_tokens_per_s,
                "output_tokens": self.output_tokens}


def percentile(values: list[float], q: float) -> float:
    """Nearest rank: percentile([1, 2, 3, 4], 50) -> 2; percentile([1, 2, 3], 95) -> 3."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def spread(values: list[float]) -> Spread | None:
    return Spread(statistics.median(values), percentile(values, 95), len(values)) if values else None


def room_metrics(traces: list) -> RoomMetrics:
    """traces: finished runs (pipeline.run.record.Trace: timings, usage, decode steps)."""
    timings = [t.timings for t in traces]
    busy, tokens = 0.0, 0
    for t in traces:
        steps = t.steps
        shared = statistics.mean(s.batch_size for s in steps) if steps else 1
        busy += t.timings.total_s / max(shared, 1)
        tokens += t.usage.completion_tokens
    return RoomMetrics(
        runs=len(traces),
        ttft_s=spread([x.ttft_s for x in timings]),
        tpot_s=spread([x.tpot_s for x in timings if x.tpot_s is not None]),
        e2e_s=spread([x.total_s for x in timings]),
        throughput_tokens_per_s=tokens / busy if busy > 0 else None,
        output_tokens=tokens,
    )


def room_metrics_by_path(traces: list) -> list[dict]:
    """The runs grouped by model and by how they were served (the path of their prefill, which names TTFT; of their
    decode steps, which names TPOT; the device), largest group first: [{ttft_label, tpot_label, device, model,
    metrics}]. Times of different models or paths are never pooled into one median (a server holds both models'
    runs)."""
    def served_as(t) -> ServedAs:
        timings = t.timings
        return ServedAs(time_label("TTFT", timings.prefill_path), time_label("TPOT", timings.decode_path),
                        timings.device, t.dims.name)

    return [{**served._asdict(), "metrics": room_metrics(runs)}
            for served, runs in grouped_by_serving(traces, served_as)]
