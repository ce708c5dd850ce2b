"""Fewer bytes per token: HF fp32 `generate` and our plain path in each weight format, interleaved.

  .venv/bin/python bench/weight_formats_bench.py [--model smollm2-135m|gemma-3-270m] [--tokens 32] [--repeats 3]
      [--profile N]   # then torch's profiler over N decode steps per format: the top operations by self CPU time
  ATEN_CPU_CAPABILITY=avx2 .venv/bin/python bench/weight_formats_bench.py ...   # ATen's kernels of another level

Each round runs HF fp32 generate, then the plain path in fp32, bf16, bf16 with oneDNN (every bf16 matmul on
oneDNN, as before pipeline.model.weight_formats.aten_bf16_gemv) and int8, on the same greedy request; each
figure is the median of --repeats rounds with its range. Printed per format: weight bytes read per token,
TPOT (the answer's), that read's share of this machine's copy bandwidth (measured in the same run: the bytes
a step reads / TPOT, against the copy's read + write per second), a decode step's wall and CPU time (CPU: the
whole process's, every thread; what a step costs a shared server), the resident memory the converted copy
added, and the quality against fp32 (KL, top-1 agreement, greedy answer); then the 8-bit KV cache's
attention error on the default prompt. A ratio is given only where the ranges do not overlap.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from contextlib import contextmanager

from decode_speed_bench import copy_bandwidth, hf_tpot  # bench/ is this script's folder

from pipeline.core.timing import compare_runs
from pipeline.faster.formats import greedy_answer, prompt_ids, quality_rows, step_cost
from pipeline.model import weight_formats
from pipeline.model.loader import shared_model
from pipeline.model.weight_formats import WEIGHT_FORMATS

QUESTION = "Are tomatoes fruit?"
ONEDNN = "bf16 oneDNN"  # the bf16 model with every matmul on oneDNN, as before aten_bf16_gemv


def resident_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


@contextmanager
def kernel_of(row: str):
    """The "bf16 oneDNN" row runs with aten_bf16_gemv off; every other row as served."""
    weight_formats.ATEN_GEMV = row != ONEDNN
    try:
        yield
    finally:
        weight_formats.ATEN_GEMV = True


def main() -> int:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", type=int, default=0, help="decode steps to profile per format (0: none)")
    args = ap.parse_args()
    models, added = {}, {}
    for w in WEIGHT_FORMATS:
        before = resident_bytes()
        models[w] = shared_model(args.model, weights=w)
        added[w] = resident_bytes() - before
    rows_models = {"fp32": models["fp32"], "bf16": models["bf16"], ONEDNN: models["bf16"], "int8": models["int8"]}
    fp32 = models["fp32"]
    ids = prompt_ids(fp32, QUESTION)
    runs = {name: [] for name in ("HF fp32 generate", *rows_models)}
    steps = {name: [] for name in rows_models}
    for _ in range(args.repeats):
        runs["HF fp32 generate"].append(hf_tpot(fp32, ids, args.tokens)[0])
        for row, lm in rows_models.items():
            with kernel_of(row):
                runs[row].append(greedy_answer(lm, QUESTION, args.tokens)[2])
                steps[row].append(step_cost(lm, QUESTION, args.tokens))
    bandwidth = copy_bandwidth()
    rows = quality_rows(models, QUESTION, max_new_tokens=args.tokens)
    with kernel_of(ONEDNN):
        onednn_greedy = greedy_answer(models["bf16"], QUESTION, args.tokens)[0]
    hf = runs["HF fp32 generate"]
    capability = torch.backends.cpu.get_cpu_capability()
    print(f"{fp32.name}; {cpu_name()}, {torch.get_num_threads()} threads, ATen {capability}; "
          f"load {os.getloadavg()[0]:.1f}; {args.repeats} interleaved rounds of {args.tokens} tokens; copy bandwidth "
          f"{bandwidth / 1e9:.1f} GB/s (read + write)")
    print(f"{'':18s} {'read/token':>11s} {'TPOT ms':>8s} {'range':>13s} {'vs HF fp32':>14s} {'bandwidth':>9s} "
          f"{'step ms':>14s} {'step CPU ms':>15s} {'vs fp32':>8s} {'RSS added':>10s} {'KL mean':>9s} {'KL max':>8s} "
          f"{'top-1':>6s}  greedy")
    cpu32 = [c for _, c in steps["fp32"]]
    for name, xs in runs.items():
        c = compare_runs(xs, hf)
        vs = "—" if name.startswith("HF") else (f"{c.ratio:.2f}x" if c.separated else "ranges overlap")
        line = f"{name:18s}"
        if name in rows_models:
            r = rows["bf16" if name == ONEDNN else name]
            share = r.bytes_per_token / c.a_median / bandwidth
            wall = [s * 1e3 for s, _ in steps[name]]
            cpu = compare_runs([s for _, s in steps[name]], cpu32)
            cpu_vs = "—" if name == "fp32" else (f"{cpu.ratio:.2f}x" if cpu.separated else "overlap")
            greedy_ids = onednn_greedy if name == ONEDNN else r.greedy_ids
            greedy = ("= fp32" if greedy_ids == rows["fp32"].greedy_ids else "leaves fp32's")
            quality = "(the bf16 weights)" if name == ONEDNN else (
                f"{added[name] / 2**20:6.0f} MiB {r.kl_mean:9.2e} {r.kl_max:8.2e} {r.top1_agreement:6.1%}")
            line += (f" {r.bytes_per_token / 2**20:8.0f} MiB {c.a_median * 1e3:8.1f} {c.a_range[0] * 1e3:6.1f}-"
                     f"{c.a_range[1] * 1e3:<6.1f} {vs:>14s} {share:9.0%} "
                     f"{statistics.median(wall):5.1f} ({min(wall):.0f}-{max(wall):.0f}) "
                     f"{cpu.a_median * 1e3:6.1f} ({cpu.a_range[0] * 1e3:.0f}-{cpu.a_range[1] * 1e3:.0f}) {cpu_vs:>8s} "
                     f"{quality}  {greedy}")
        else:
            line += f" {'':11s} {c.a_median * 1e3:8.1f} {c.a_range[0] * 1e3:6.1f}-{c.a_range[1] * 1e3:<6.1f}"
        print(line)
    print("(RSS added: the fp32 line is the model's load; each other line its converted copy.) "
          "Held: " + ", ".join(f"{w} {r.parameter_bytes / 1e6:,.0f} MB" for w, r in rows.items()))
    for w, r in rows.items():
        print(f"  {w} greedy: {r.greedy_text[:100]!r}")
    kv_report(fp32)
    if args.profile:
        for row, lm in rows_models.items():
            with kernel_of(row):
                profile_steps(row, lm, args.profile)
    return 0


def cpu_name() -> str:
    """The CPU's model name and whether it has native bf16 (AVX-512 bf16, AMX), from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            info = f.read()
    except OSError:
        return "CPU unknown"
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    native = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    return f"{name} ({', '.join(native) if native else 'no native bf16'})"


def profile_steps(row: str, lm, steps: int) -> None:
    """torch's profiler over `steps` plain decode steps after the default question: the top 8 operations by self
    CPU time, each shape apart."""
    from torch.profiler import ProfilerActivity, profile

    from pipeline.model.decoders.factory import open_decoder

    ids = prompt_ids(lm, QUESTION)
    decoder = open_decoder(lm, len(ids) + steps + 2)
    token = int(decoder.prefill(ids).argmax())
    token = int(decoder.step(token).argmax())  # one step before: first-call set-up is not a step's cost
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            token = int(decoder.step(token).argmax())
    print(f"--- {row}: {steps} decode steps, top operations by self CPU time")
    print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=8,
                                                            max_name_column_width=36, max_shapes_column_width=44))


def kv_report(lm) -> None:
    from pipeline.model.kv_int8 import attention_error
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest, GenerationOptions

    trace = run_trace(ChatRequest.from_question(QUESTION, options=GenerationOptions(max_new_tokens=1)), lm)
    p = trace.prefill
    e = attention_error(p.q_rot, p.k_rot, p.v, trace.dims)
    print(f"8-bit KV cache, default prompt ({len(trace.ids)} positions): {e.bytes_fp32:,} B fp32, {e.bytes_bf16:,} B "
          f"bf16, {e.bytes_int8:,} B int8 + scales; attention output error {max(e.relative):.3%} (worst layer), "
          f"{sum(e.relative) / len(e.relative):.3%} (mean); stored K/V error {e.kv_rel:.3%}")


if __name__ == "__main__":
    sys.exit(main())
