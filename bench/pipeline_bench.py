"""Benchmark of the pipeline core. Prints figures and ratios measured in this same run.

  .venv/bin/python bench/pipeline_bench.py [--skip-conversion]

Goals: cold start from the weights cache <= 2 s; full capture of a 64-token chat
prompt + 32 generated tokens <= 1.10x plain HF generate; peak memory <= 1 GB for that run and
<= 2 GB for a 2,048-token prompt; 1,000 draws from stored logits <= 5 ms.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LONG_ANSWER_QUESTION = ("Explain step by step, in a long and detailed answer, why botanists call tomatoes a fruit "
                        "while cooks call them a vegetable, and give three examples of similar foods.")


def child(code: str, env: dict | None = None) -> dict:
    """Run code in a fresh interpreter; it prints one JSON line last."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, **(env or {})}, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


COLD_START = """
import time, json; t0 = time.perf_counter()
from pipeline.model.loader import load_model
lm = load_model(log=lambda m: None)
print(json.dumps({"ready_s": time.perf_counter() - t0}))
"""

PEAK = """
import json, re
from pipeline.model.loader import load_model
from pipeline.stages.request import ChatRequest, GenerationOptions
from pipeline.run.trace import run_trace

def vm(key):
    return int(re.search(key + r":\\s+(\\d+)", open("/proc/self/status").read()).group(1)) / 1024

lm = load_model(log=lambda m: None)
after_load = vm("VmRSS")
open("/proc/self/clear_refs", "w").write("5")  # reset the high-water mark: measure the run alone
question = {question!r}
t = run_trace(ChatRequest.from_question(question, options=GenerationOptions(max_new_tokens={new})), lm)
print(json.dumps({{"prompt_tokens": len(t.ids), "new": len(t.generated_token_ids), "after_load_mb": after_load,
                   "peak_mb": vm("VmHWM")}}))
"""


def prompt_of(lm, n_tokens: int) -> str:
    """A question whose chat prompt is about n_tokens long (template included)."""
    from pipeline.run.trace import tokenize_request
    from pipeline.stages.request import ChatRequest

    words = "Tomatoes grow on vines and botanists classify them by how the seeds develop inside. ".split()
    text, i = LONG_ANSWER_QUESTION, 0
    while len(tokenize_request(lm, ChatRequest.from_question(text))[2]) < n_tokens:
        text += " " + words[i % len(words)]
        i += 1
    return text


def bench_capture_vs_generate(lm, repeats: int = 3) -> dict:
    import torch

    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest, GenerationOptions

    question = LONG_ANSWER_QUESTION
    request = ChatRequest.from_question(question, options=GenerationOptions(max_new_tokens=32))
    ours, theirs = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        trace = run_trace(request, lm)
        ours.append(time.perf_counter() - t0)
        ids = torch.tensor([trace.ids], device=lm.device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            ref = lm.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=32)
        theirs.append(time.perf_counter() - t0)
    same = trace.generated_token_ids == ref[0, ids.shape[1]:].tolist()
    return {"prompt_tokens": len(trace.ids), "new_tokens": len(trace.generated_token_ids), "same_tokens": same,
            "capture_s": statistics.median(ours), "generate_s": statistics.median(theirs)}


def bench_draws(lm) -> dict:
    import numpy as np

    from pipeline.run.trace import run_trace
    from pipeline.stages.next_token import draw, final_probs
    from pipeline.stages.request import ChatRequest, GenerationOptions

    trace = run_trace(ChatRequest.from_question("Are tomatoes fruit?", options=GenerationOptions(max_new_tokens=1)), lm)
    logits = trace.prefill.last_logits  # (V,)
    options = GenerationOptions(temperature=0.8, top_k=50, top_p=0.95, min_p=0.02)
    rng = np.random.default_rng(0)
    probs = final_probs(logits, options)
    draw_only, with_filters = [], []
    for _ in range(200):
        t0 = time.perf_counter()
        draw(probs, 1000, rng)
        draw_only.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        draw(final_probs(logits, options), 1000, rng)
        with_filters.append(time.perf_counter() - t0)
    return {"draw_1000_ms": statistics.median(draw_only) * 1000,
            "filters_plus_draw_1000_ms": statistics.median(with_filters) * 1000}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-conversion", action="store_true", help="skip timing the one-time GGUF conversion")
    parser.add_argument("--only", choices=["startup", "capture", "memory", "draws"], default=None)
    args = parser.parse_args()
    from pipeline.model.loader import load_model
    from pipeline.model.weights_cache import ensure_weights_cache

    ensure_weights_cache()

    def want(part: str) -> bool:
        return args.only in (None, part)
    if want("startup"):
        bench_startup(args)
    lm = load_model(log=lambda m: None)
    if want("capture"):
        bench_capture(lm)
    if want("memory"):
        bench_memory(lm)
    if want("draws"):
        print("\n== Sampling from stored logits (V = 49,152)")
        d = bench_draws(lm)
        print(f"1,000 draws: {d['draw_1000_ms']:.3f} ms; with temperature/top-k/top-p/min-p recomputed: "
              f"{d['filters_plus_draw_1000_ms']:.3f} ms  goal <= 5 ms")


def bench_startup(args) -> None:
    from pipeline.model.weights_cache import convert_gguf_to_cache

    print("== Start-up")
    cold = [child(COLD_START)["ready_s"] for _ in range(3)]
    print("cold start from the weights cache (fresh process, imports included): "
          f"median {statistics.median(cold):.2f} s "
          f"(runs: {', '.join(f'{c:.2f}' for c in cold)})  goal <= 2 s")
    if not args.skip_conversion:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            convert_gguf_to_cache(__import__("pathlib").Path(tmp) / "w", log=lambda m: None)
            conversion = time.perf_counter() - t0
        print(f"one-time GGUF -> weights-cache conversion: {conversion:.1f} s "
              f"({conversion / statistics.median(cold):.0f}x the cached start)")


def bench_capture(lm) -> None:
    print("\n== Full capture vs plain HF generate (greedy, 32 new tokens)")
    r = bench_capture_vs_generate(lm)
    print(f"prompt {r['prompt_tokens']} tokens, {r['new_tokens']} generated, "
          f"same tokens as generate: {r['same_tokens']}")
    print(f"full capture {r['capture_s']:.3f} s vs generate {r['generate_s']:.3f} s -> "
          f"ratio {r['capture_s'] / r['generate_s']:.2f}x  goal <= 1.10x")


def bench_memory(lm) -> None:
    print("\n== Peak memory (fresh process each; RSS high-water mark of the run, weights and torch included)")
    short = child(PEAK.format(question=LONG_ANSWER_QUESTION, new=32))
    print(f"{short['prompt_tokens']}-token prompt + {short['new']} tokens: peak {short['peak_mb']:.0f} MB "
          f"(model loaded: {short['after_load_mb']:.0f} MB)  goal <= 1024 MB")
    long_prompt = prompt_of(lm, 2048)
    big = child(PEAK.format(question=long_prompt, new=4))
    print(f"{big['prompt_tokens']}-token prompt + {big['new']} tokens: peak {big['peak_mb']:.0f} MB "
          f"(ratio to the short run {big['peak_mb'] / short['peak_mb']:.2f}x)  goal <= 2048 MB")



if __name__ == "__main__":
    main()
