"""Decode speed: the captured path, the plain serving path and plain HF `generate`, same request.

  .venv/bin/python bench/decode_speed_bench.py [--tokens 48] [--repeats 3]

All three decode the same greedy tokens (checked). They run interleaved (captured, plain, HF,
captured, ...) and each figure is the median of --repeats with its range, so load on a shared
machine hits all three alike. Also printed: the weights' bytes divided by the time per token — the
memory bandwidth a decode step would need if it only read every weight once — next to this
machine's measured copy bandwidth (a rough ceiling); where the captured path and the plain path
spend their time (cProfile of one run each). The cold start has its own script,
bench/cold_start_bench.py.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time

import numpy as np

from pipeline.faster.fast_path import generate
from pipeline.model.loader import shared_model
from pipeline.run.trace import run_trace
from pipeline.stages.request import ChatRequest, GenerationOptions


def hf_tpot(lm, ids: list[int], n: int) -> tuple[float, list[int]]:
    import torch

    stamps = []

    class Clock:
        def put(self, value):
            stamps.append(time.perf_counter())

        def end(self):
            pass

    x = torch.tensor([ids])
    with torch.inference_mode():
        out = lm.model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n,
                                streamer=Clock())
    gaps = np.diff(stamps[1:])  # stamps[0] is the prompt itself, [1] the first new token
    return float(np.mean(gaps[1:])) if len(gaps) > 1 else float("nan"), out[0, len(ids):].tolist()


def copy_bandwidth() -> float:
    """Bytes per second numpy copies a 256 MB array (read + write counted as 2x the size)."""
    a = np.ones(64 * 2**20, dtype=np.float32)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t0)
    return 2 * a.nbytes / best


def own_time_table(run, rows: int = 8) -> str:
    """cProfile of one call of `run`: the `rows` functions with the most own time."""
    prof = cProfile.Profile()
    prof.enable()
    run()
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(rows)
    lines = s.getvalue().splitlines()
    table = lines[next(i for i, line in enumerate(lines) if "ncalls" in line):]
    return "\n".join(line[:150] for line in table if line.strip())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    lm = shared_model()
    request = ChatRequest.from_question("Are tomatoes fruit?", options=GenerationOptions(max_new_tokens=args.tokens))
    captured, plain, hf = [], [], []
    for _ in range(args.repeats):
        t = run_trace(request, lm)
        f = generate(lm, request)
        h, hf_tokens = hf_tpot(lm, t.ids, len(t.generated_token_ids))
        assert t.generated_token_ids == f.generated, "plain path chose other tokens"
        assert hf_tokens[:len(t.generated_token_ids)] == t.generated_token_ids, "HF generate chose other tokens"
        captured.append(t.timings.tpot_s)
        plain.append(f.tpot_s)
        hf.append(h)
    med = statistics.median
    span = lambda xs: f"{min(xs) * 1e3:.0f}-{max(xs) * 1e3:.0f}"  # noqa: E731
    weights = sum(p.numel() * p.element_size() for p in lm.model.parameters())
    bw = copy_bandwidth()
    print(f"{len(t.generated_token_ids)} greedy tokens, identical on all three paths; {args.repeats} interleaved runs")
    for name, xs in (("captured (our decode loop)", captured), ("plain serving path", plain), ("HF generate", hf)):
        print(f"  {name:28s} TPOT {med(xs) * 1e3:6.1f} ms (range {span(xs)})  -> {med(xs) / med(hf):.2f}x HF; "
              f"weights {weights / 2**20:,.0f} MiB / TPOT = {weights / med(xs) / 1e9:5.1f} GB/s "
              f"({weights / med(xs) / bw:.0%} of this machine's copy bandwidth, {bw / 1e9:.1f} GB/s)")

    for label, run in (("the captured run", lambda: run_trace(request, lm)),
                       ("the plain serving path", lambda: generate(lm, request))):
        print(f"\nwhere {label} spends its time (cProfile, own time per function):")
        print(own_time_table(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
