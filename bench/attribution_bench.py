"""Why this token on long prompts: time and memory of one step's attribution.

  TPE_CACHE_DIR=... .venv/bin/python bench/attribution_bench.py [--model smollm2-135m] [--tokens 64 256 500]
      [--repeat 3] [--ig]

For each prompt length (a sentence repeated to that many tokens): the captured pass (`record_step`), direct
logit attribution, the contribution graph (threshold 0.04, 10 positions per layer) and, with --ig, integrated
gradients (30 steps); medians and ranges over the repeats (the machine is shared: read the spread), and the
process's peak RSS after each length (ru_maxrss: it only grows, so lengths go up).
"""
from __future__ import annotations

import argparse
import resource
import time

SENTENCE = "Tomatoes are fruit because they grow from the flower and hold the seeds. "


def timed(fn, repeat: int) -> tuple[float, float, float, object]:
    out, times = None, []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2], times[0], times[-1], out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--tokens", type=int, nargs="+", default=[64, 256, 500])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ig", action="store_true")
    args = ap.parse_args()
    from pipeline.attribution.dla import direct_logit_attribution
    from pipeline.attribution.graph import contribution_graph
    from pipeline.attribution.record import record_step
    from pipeline.model.loader import shared_model

    lm = shared_model(args.model)
    base = lm.tokenizer(SENTENCE * 200)["input_ids"]
    print(f"{lm.name}: L={lm.dims.L} H={lm.dims.H} D={lm.dims.D}; median [min-max] of {args.repeat} runs, seconds")
    for n in sorted(args.tokens):
        ids = base[:n]
        rec_t = timed(lambda: record_step(lm, ids), args.repeat)
        rec = rec_t[3]
        target = int(rec.logits.argmax())
        dla_t = timed(lambda: direct_logit_attribution(rec, lm, target), args.repeat)
        graph_t = timed(lambda: contribution_graph(rec, lm, 0.04, 10), args.repeat)
        held = sum(a.nbytes for a in (rec.resid, rec.attn, rec.mlp, rec.z, rec.pattern, rec.v)) / 2**20
        line = (f"T={n:4d}  record {rec_t[0]:6.2f} [{rec_t[1]:.2f}-{rec_t[2]:.2f}]  dla {dla_t[0]:5.2f} "
                f"[{dla_t[1]:.2f}-{dla_t[2]:.2f}]  graph {graph_t[0]:6.2f} [{graph_t[1]:.2f}-{graph_t[2]:.2f}] "
                f"({len(graph_t[3].edges)} edges)  record holds {held:6.1f} MB")
        if args.ig:
            from pipeline.attribution.gradients import input_attribution

            ig_t = timed(lambda: input_attribution(lm, ids, target), 1)
            line += f"  IG {ig_t[0]:6.1f} s (gap {ig_t[3].completeness_gap:.1%})"
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(line + f"  peak RSS {peak:,.0f} MB", flush=True)


if __name__ == "__main__":
    main()
