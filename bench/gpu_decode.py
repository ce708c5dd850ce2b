"""The GPU decode table in one run, on whatever device this is: every decode and prefill figure of the project beside
HF on the same device and the same ids.

  .venv/bin/python bench/gpu_decode.py [--quick] [--tokens 32] [--repeats 5] [--device cuda]

Rows (ms per token for decode, ms per pass for prefill), each a median of --repeats with its spread (low-high), and
its ratio to HF `generate` on the same device: eager (HF's DynamicCache), and with its static cache
(`cache_implementation="static"`; on CUDA transformers compiles that forward, CUDA graphs included):
- plain decode: PlainDecoder (the plain serving path's steps) in fp32, and in bf16;
- graphed decode: GraphedDecoder, the static-shape step (a replayed CUDA graph on CUDA, eager elsewhere);
- captured decode: the trace's recording path (hooks on every layer), fp32 and bf16 (bf16 measured 3.3x
  slower there on an H200, 2026-12-04);
- the room's batched decode step at B = 1, 4, 16 rows (prompts of different lengths): BatchDecoder (HF's forward
  over the joined, left-padded cache) against GraphedBatchDecoder (the static batched step, one bucket: a replayed
  CUDA graph on CUDA, eager elsewhere), ms per step, through the room's own merge and pass (no sampler);
- prefill at T = 16 / 64 / 256: the plain path's prefill against HF's forward over the same T ids;
- the floor: the weight bytes a decode step reads (pipeline.model.weight_formats.bytes_per_token) over this device's
  measured copy bandwidth (pipeline.costs.ceilings), fp32 and bf16;
- the operations each decode step dispatches (pipeline.costs.launches), plain, graphed and captured, fp32 and bf16:
  on a GPU each is a kernel launch, except inside a replayed graph; and the values each reads back to the host;
- on CUDA, why one step takes what it takes (bf16 was 3x slower than fp32 on an H200): torch's
  profiler over 8 plain steps and 8 of HF's forward (the captured path's) in each format: the GPU activities each
  step ran (kernels, copies), their summed GPU time beside the step's profiled wall time (far under it: the GPU
  waits for launches) and the five that took most.
The measurements run interleaved (one of each per round), so a busy machine slows them alike; one warm-up of each
first (a graph's capture and HF's compilation happen there). The greedy ids of the plain, graphed and HF paths are
checked equal. --quick: a random-weight Llama with SmolLM2's heads at a tiny width (no weights files needed), fewer
tokens and rounds: small enough for CI on a CPU.
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from typing import Callable

import torch

from pipeline.costs.ceilings import ceilings, device_name, measure
from pipeline.model.decoders.graphed import GraphedDecoder
from pipeline.model.decoders.graphed_batch import GraphedBatch
from pipeline.model.decoders.plain import PlainDecoder
from pipeline.model.loader import LoadedModel, converted_copy, shared_model
from pipeline.model.weight_formats import bytes_per_token

PREFILL_T = (16, 64, 256)
ROOM_ROWS = (1, 4, 16)
QUICK_LAYOUT = dict(num_hidden_layers=4, num_attention_heads=9, num_key_value_heads=3, hidden_size=72,
                    intermediate_size=144, tie_word_embeddings=True, vocab_size=49152)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def tiny_model(device: torch.device) -> LoadedModel:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(3)
    model = LlamaForCausalLM(LlamaConfig(**QUICK_LAYOUT, attn_implementation="sdpa")).eval().to(device)
    return LoadedModel(model=model, tokenizer=None, name="tiny-llama (random weights)", device=device)


def decode_s(lm: LoadedModel, kind, ids: list[int], n: int, out: list[int] | None = None) -> float:
    """Seconds per token of n greedy steps of a decoder (after its prefill and its first step, where a graph is
    captured); the ids chosen go into `out`."""
    decoder = kind(lm, len(ids) + n + 1)
    token = int(decoder.prefill(ids).argmax())
    chosen = [token]
    token = int(decoder.step(token).argmax())
    sync(lm.device)
    t0 = time.perf_counter()
    for _ in range(n):
        chosen.append(token)
        token = int(decoder.step(token).argmax())  # the argmax read back each step, as serving does
    sync(lm.device)
    if out is not None:
        out[:] = chosen
    return (time.perf_counter() - t0) / n


class Stamps:
    """A generate streamer that notes when each new token arrives (HF hands it over on the CPU: the step is done)."""

    def __init__(self):
        self.at: list[float] = []

    def put(self, value) -> None:
        self.at.append(time.perf_counter())

    def end(self) -> None:
        pass


def hf_decode_s(lm: LoadedModel, ids: list[int], n: int, static: bool, out: list[int] | None = None) -> float:
    """Seconds per token of HF generate, greedy: the mean gap between new tokens after the first two (the first
    stamp is the prompt itself, the second follows the prompt's pass). Exactly n + 2 tokens (no early stop)."""
    x = torch.tensor([ids], device=lm.device)
    extra = {"cache_implementation": "static"} if static else {}
    stamps = Stamps()
    with torch.inference_mode():
        got = lm.model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n + 2,
                                min_new_tokens=n + 2, streamer=stamps, **extra)
    if out is not None:
        out[:] = got[0, len(ids):].tolist()
    return (stamps.at[-1] - stamps.at[2]) / (len(stamps.at) - 3)


def captured_decode_s(lm: LoadedModel, n: int) -> float:
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest, GenerationOptions

    request = ChatRequest.from_question("Are tomatoes fruit?", options=GenerationOptions(max_new_tokens=n))
    return run_trace(request, lm).timings.tpot_s


def room_step_s(lm: LoadedModel, prompts: list[list[int]], n: int, static: bool, out: list | None = None) -> float:
    """Seconds per step of the room's batched decode: the prompts prefilled, joined by the decoder's own merge,
    then n greedy steps of its pass (BatchDecoder._forward, or GraphedBatchDecoder's static step), the argmax of
    each row fed back. The rows' ids go into `out`."""
    from types import SimpleNamespace

    from pipeline.model.kv_tensors import cache_layers
    from pipeline.stages.batched_decoding import BatchDecoder, BatchRow
    from pipeline.stages.graphed_batch_decoding import GraphedBatchDecoder

    batch = GraphedBatchDecoder(lm, GraphedBatch(lm)) if static else BatchDecoder(lm)
    joining, tokens = [], []
    for ids in prompts:
        logits, cache = lm.forward_chunked(ids)
        answer = SimpleNamespace(options=SimpleNamespace(max_new_tokens=n + 1), generated=[])
        joining.append((BatchRow(answer, len(ids), []), cache_layers(cache)))
        tokens.append(int(logits.argmax()))
    batch._merge([], joining)
    chosen = [tokens]
    sync(lm.device)
    t0 = time.perf_counter()
    for _ in range(n):
        logits = batch._forward(tokens)
        for r in batch.rows:
            r.length += 1
        tokens = logits.argmax(-1).tolist()  # read back each step, as the room does
        chosen.append(tokens)
    sync(lm.device)
    if out is not None:
        out[:] = chosen
    return (time.perf_counter() - t0) / n


PREFILL_CALLS = 3  # prefills timed per round (their mean): one alone is mostly the scheduler on a busy machine


def prefill_s(lm: LoadedModel, ids: list[int]) -> float:
    sync(lm.device)
    t0 = time.perf_counter()
    for _ in range(PREFILL_CALLS):
        PlainDecoder(lm, len(ids) + 1).prefill(ids)
    sync(lm.device)
    return (time.perf_counter() - t0) / PREFILL_CALLS


def hf_prefill_s(lm: LoadedModel, ids: list[int]) -> float:
    x = torch.tensor([ids], device=lm.device)
    sync(lm.device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for _ in range(PREFILL_CALLS):
            lm.model(input_ids=x, logits_to_keep=1)
    sync(lm.device)
    return (time.perf_counter() - t0) / PREFILL_CALLS


def _decoder_after_two_steps(lm: LoadedModel, kind, ids: list[int]):
    """A decoder of `kind` (a class, or 'captured': HF's forward over a cache) past its prefill and first two steps
    (where a graph is captured), with the token to feed next."""
    from pipeline.model.decoders.protocol import CacheDecoder

    if kind == "captured":
        logits, cache = lm.forward_chunked(ids)
        decoder = CacheDecoder(lm, cache)
    else:
        decoder = kind(lm, len(ids) + 16)
        logits = decoder.prefill(ids)
    token = int(logits.argmax())
    for _ in range(2):
        token = int(decoder.step(token).argmax())
    return decoder, token


def step_operations(lm: LoadedModel, kind, ids: list[int]) -> str:
    """The operations one decode step dispatches (a replayed graph: its inputs' copies and its output's) and the
    values it reads back to the host, each a wait for a GPU."""
    from pipeline.costs.launches import operations

    decoder, token = _decoder_after_two_steps(lm, kind, ids)
    ops = operations(lambda: decoder.step(token))
    return f"{ops.total:,} ({ops.host_reads} host reads)"


def kernel_profile(lm: LoadedModel, kind, ids: list[int], steps: int = 8) -> str:
    """On CUDA: the GPU activities a step ran (kernels and copies), their GPU time a step beside the step's wall time
    under the profiler (which adds to it), and the five costliest."""
    from collections import Counter

    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    decoder, token = _decoder_after_two_steps(lm, kind, ids)
    sync(lm.device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            token = int(decoder.step(token).argmax())
        sync(lm.device)
        wall = (time.perf_counter() - t0) / steps
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    gpu_us = Counter()
    for e in kernels:
        gpu_us[e.name] += getattr(e, "device_time", None) or getattr(e, "cuda_time", 0.0)
    top = ", ".join(f"{name[:60]} {us / steps:,.0f} us" for name, us in gpu_us.most_common(5))
    return (f"{len(kernels) / steps:,.0f} GPU activities a step (kernels, copies), GPU busy "
            f"{sum(gpu_us.values()) / steps / 1e3:.3f} ms of {wall * 1e3:.3f} ms (wall, profiled); "
            f"the costliest: {top}")


def rounds(runs: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Each run once to warm up, then `repeats` rounds of one of each, in order."""
    for run in runs.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            times[name].append(run())
    return times


def row(name: str, xs: list[float], hf: float, hf_static: float | None) -> str:
    med = statistics.median(xs)
    static = f"{med / hf_static:6.2f}x" if hf_static else "     -"
    return (f"  {name:34s} {med * 1e3:9.3f} ms  ({min(xs) * 1e3:.3f}-{max(xs) * 1e3:.3f})  "
            f"{med / hf:6.2f}x  {static}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a tiny random-weight model, 16 tokens, 3 rounds (CI)")
    ap.add_argument("--tokens", type=int, default=None, help="greedy tokens timed (default 32; 16 with --quick)")
    ap.add_argument("--repeats", type=int, default=None, help="interleaved rounds (default 5; 3 with --quick)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    n = args.tokens or (16 if args.quick else 32)
    repeats = args.repeats or (3 if args.quick else 5)
    device = torch.device(args.device)
    lm = tiny_model(device) if args.quick else shared_model()
    if lm.device != device:
        print(f"the model loaded on {lm.device}, not {device}: measuring there")
        device = lm.device
    bf16 = converted_copy(lm, "bf16")
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(300, 40_000, (max(PREFILL_T),), generator=g).tolist()
    ids = prompt[:40]  # the decode's prompt: about the default question's length

    plain_ids, graphed_ids, hf_ids = [], [], []
    decode = {
        "HF generate, eager, fp32": lambda: hf_decode_s(lm, ids, n, False, hf_ids),
        "HF generate, static cache, fp32": lambda: hf_decode_s(lm, ids, n, True),
        "HF generate, eager, bf16": lambda: hf_decode_s(bf16, ids, n, False),
        "HF generate, static cache, bf16": lambda: hf_decode_s(bf16, ids, n, True),
        "plain decode, fp32": lambda: decode_s(lm, PlainDecoder, ids, n, plain_ids),
        "graphed decode, fp32": lambda: decode_s(lm, GraphedDecoder, ids, n, graphed_ids),
        "plain decode, bf16": lambda: decode_s(bf16, PlainDecoder, ids, n),
        "graphed decode, bf16": lambda: decode_s(bf16, GraphedDecoder, ids, n),
    }
    if lm.tokenizer is not None:
        decode["captured decode (the trace), fp32"] = lambda: captured_decode_s(lm, n)
        decode["captured decode (the trace), bf16"] = lambda: captured_decode_s(bf16, n)
    for T in PREFILL_T:
        decode[f"prefill T={T}, plain path"] = lambda T=T: prefill_s(lm, prompt[:T])
        decode[f"prefill T={T}, HF forward"] = lambda T=T: hf_prefill_s(lm, prompt[:T])
    room_ids = {}
    for B in ROOM_ROWS:
        rows = [prompt[7 * i:7 * i + 40 - 3 * (i % 5)] for i in range(B)]  # 28-40 tokens: rows at other lengths
        for kind, static in (("eager", False), ("static", True)):
            got = room_ids.setdefault((B, kind), [])
            decode[f"room step B={B}, {kind}"] = lambda rows=rows, static=static, got=got: room_step_s(
                lm, rows, n, static, got)
    times = rounds(decode, repeats)

    print(f"{device_name(device)}, torch {torch.__version__}, model {lm.name}; {n} greedy tokens after a "
          f"{len(ids)}-token prompt, {repeats} interleaved rounds; medians (low-high)")
    same = plain_ids == graphed_ids and plain_ids[:len(hf_ids)] == hf_ids[:len(plain_ids)]
    print(f"greedy ids: plain, graphed and HF eager {'the same' if same else 'DIFFER'}")
    med = {name: statistics.median(xs) for name, xs in times.items()}
    print(f"  {'':34s} {'median':>12s}  {'(spread)':>14s}  x HF eager  x HF static")
    for precision in ("fp32", "bf16"):
        hf, hf_static = med[f"HF generate, eager, {precision}"], med[f"HF generate, static cache, {precision}"]
        for kind in ("HF generate, eager", "HF generate, static cache", "plain decode", "graphed decode",
                     "captured decode (the trace)"):
            name = f"{kind}, {precision}"
            if name in times:
                print(row(name, times[name], hf, hf_static))
    for kind in ("plain decode", "graphed decode", "captured decode (the trace)"):
        if f"{kind}, bf16" in med:
            print(f"  {kind}: bf16 / fp32 = {med[f'{kind}, bf16'] / med[f'{kind}, fp32']:.2f}")
    for B in ROOM_ROWS:
        eager = med[f"room step B={B}, eager"]
        for kind in ("eager", "static"):
            print(row(f"room step B={B}, {kind} (x eager)", times[f"room step B={B}, {kind}"], eager, None))
    same_room = all(room_ids[(B, "eager")] == room_ids[(B, "static")] for B in ROOM_ROWS)
    print(f"room steps: greedy ids of every row, eager and static, {'the same' if same_room else 'DIFFER'}")
    for T in PREFILL_T:
        hf_t = med[f"prefill T={T}, HF forward"]
        for kind in ("plain path", "HF forward"):
            print(row(f"prefill T={T}, {kind}", times[f"prefill T={T}, {kind}"], hf_t, None))
    kinds = (("plain", PlainDecoder), ("graphed", GraphedDecoder)) + (
        (("captured", "captured"),) if lm.tokenizer is not None else ())
    for precision, model in (("fp32", lm), ("bf16", bf16)):
        counts = "; ".join(f"{name} {step_operations(model, kind, ids)}" for name, kind in kinds)
        print(f"  operations a decode step dispatches, {precision}: {counts}")
    profiled = (("plain decode", PlainDecoder),) + ((("captured decode (HF's forward)", "captured"),)
                                                     if lm.tokenizer is not None else ())
    for (name, kind), (precision, model) in itertools.product(profiled, (("fp32", lm), ("bf16", bf16))):
        if device.type != "cuda":
            print(f"  {name}, {precision}, profiled: on CUDA only (the GPU's activities and their time)")
            continue
        try:
            print(f"  {name}, {precision}, profiled: {kernel_profile(model, kind, ids)}")
        except Exception as e:  # the profiler is the diagnosis, not the measurement: report and go on
            print(f"  {name}, {precision}, profiled: the profiler failed ({type(e).__name__}: {e})")
    roof = measure(lm.dims, device, repeats=3) if args.quick else ceilings(lm.dims, device)
    for precision, model in (("fp32", lm), ("bf16", bf16)):
        floor = bytes_per_token(model.model) / roof.bytes_per_s
        print(f"  the floor, {precision}: {bytes_per_token(model.model) / 2**20:,.1f} MiB a token / "
              f"{roof.bytes_per_s / 1e9:,.1f} GB/s copy = {floor * 1e3:.4f} ms; "
              f"x HF eager {floor / med[f'HF generate, eager, {precision}']:.3f}, "
              f"plain decode is {med[f'plain decode, {precision}'] / floor:,.1f}x the floor")
    return 0 if same and same_room else 1


if __name__ == "__main__":
    sys.exit(main())
