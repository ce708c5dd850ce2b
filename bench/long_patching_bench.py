"""Patching a long question (663 tokens once took over 3 minutes, its estimate jumping 16-fold): each part's
seconds and work units, with and without the shared prefix (pipeline/attribution/prefix.py), and how far the time
left that the page shows (work left x seconds per unit so far) was from the time the rest really took.

  .venv/bin/python bench/long_patching_bench.py [--model smollm2-135m] [--repeat 3] [--map-parts 6]

A ~610-token question (48 boxes) with one word changed in its middle ("mid") or its last sentence ("end").
Each round runs, interleaved, the page's Patch (attribution patching + real patching of the top 12) with and without
the prefix, whole, and the full map (the last 48 positions x every layer) with and without it, its first --map-parts
parts only (0: whole): its patched passes cost alike, so the rest is extrapolated from their median, and said so.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as ./run.sh app starts the server (before torch loads)

QUESTION = " ".join(f"Box {i} is {('red', 'green', 'blue', 'yellow')[i % 4]} and holds {i * 7 % 13} apples."
                    for i in range(48)) + " Which box holds the most apples?"
CHANGES = {"mid": ("Box 24 is red", "Box 24 is blue"), "end": ("the most apples?", "the most pears?")}


@contextlib.contextmanager
def without_prefix():
    """Every pass from position 0, every position patched: the computation before the prefix."""
    from pipeline.attribution import interventions as iv
    from pipeline.attribution import prefix as px

    saved = px.start_of, iv.common_prefix_len
    px.start_of, iv.common_prefix_len = (lambda *a, **k: 0), (lambda *a, **k: 0)
    try:
        yield
    finally:
        px.start_of, iv.common_prefix_len = saved


def timed(steps, most: int | None = None) -> list[tuple[float, object]]:
    """(seconds, Progress) of each part, the last one's Progress None (it returns the result)."""
    parts = []
    while most is None or len(parts) < most:
        t = time.perf_counter()
        try:
            p = next(steps)
        except StopIteration:
            parts.append((time.perf_counter() - t, None))
            break
        parts.append((time.perf_counter() - t, p))
    steps.close()
    return parts


def worst_estimate(parts) -> tuple[float, float]:
    """The largest factor between the time left said after a part and the time the rest took: (the job's own
    forecast, Progress.left_s; counting parts, as the queue did before). 1 = exact."""
    worst = {"work": 1.0, "parts": 1.0}
    total = sum(t for t, _ in parts)
    for k, (_, p) in enumerate(parts[:-2]):
        spent = sum(t for t, _ in parts[:k + 1])
        really = total - spent
        by_work = p.left_s
        by_parts = spent / (k + 1) * (p.total - p.done)
        for name, said in (("work", by_work), ("parts", by_parts)):
            worst[name] = max(worst[name], said / really, really / said)
    return worst["work"], worst["parts"]


def median_range(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"{statistics.median(xs):7.1f} s [{xs[0]:.1f}-{xs[-1]:.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--map-parts", type=int, default=6)  # 0: the whole map
    ap.add_argument("--change", choices=sorted(CHANGES), default="mid")
    args = ap.parse_args()
    from pipeline.attribution import component_patching as cp
    from pipeline.attribution import interventions as iv
    from pipeline.core.common_prefix import common_prefix_len
    from pipeline.model.loader import shared_model
    from pipeline.stages.request import ChatRequest
    from pipeline.stages.tokens import tokenize_request

    lm = shared_model(args.model)
    old, new = CHANGES[args.change]
    clean, bad = (tokenize_request(lm.tokenizer, ChatRequest.from_question(q)).ids
                  for q in (QUESTION, QUESTION.replace(old, new)))
    assert len(clean) == len(bad), (len(clean), len(bad))
    positions = list(range(len(clean) - 48, len(clean)))
    print(f"{lm.name}: {len(clean)} tokens, first difference at {common_prefix_len(clean, bad)} ({args.change})")
    runs: dict[str, list[float]] = {}
    for r in range(args.repeat):
        for name, make, prefix in (("Patch, prefix", lambda: cp.estimate_steps(lm, clean, bad, 12), True),
                                   ("Patch, no prefix", lambda: cp.estimate_steps(lm, clean, bad, 12), False),
                                   ("map, prefix", lambda: iv.patch_residual_steps(lm, clean, bad, positions), True),
                                   ("map, no prefix", lambda: iv.patch_residual_steps(lm, clean, bad, positions),
                                    False)):
            partial = name.startswith("map") and args.map_parts > 0
            with contextlib.nullcontext() if prefix else without_prefix():
                parts = timed(make(), args.map_parts if partial else None)
            took = sum(t for t, _ in parts)
            line = " ".join(f"{t:.2f}" for t, _ in parts[:8]) + (" ..." if len(parts) > 8 else "")
            if partial:
                first = parts[0][1]
                patched = statistics.median(t for t, _ in parts[2:])
                took = parts[0][0] + parts[1][0] + patched * (first.total - 3) + parts[1][0]  # the last: one row
                print(f"round {r + 1} {name:17s} {took:7.1f} s extrapolated from {len(parts)} of "
                      f"{first.total + 1} parts, {patched:.2f} s per patched pass: {line}", flush=True)
            else:
                by_forecast, by_parts = worst_estimate(parts)
                print(f"round {r + 1} {name:17s} {took:7.1f} s in {len(parts)} parts; time left said: worst "
                      f"{by_forecast:.2f}x off (the job's forecast), {by_parts:.2f}x by counting parts: {line}",
                      flush=True)
            runs.setdefault(name, []).append(took)
    for name, xs in runs.items():
        print(f"{name:17s} median {median_range(xs)}")


if __name__ == "__main__":
    main()
