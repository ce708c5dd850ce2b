"""How long a question waits behind activation patching (the Why this token page's heaviest button), three ways:

  page   as the page ran it before: the patching in the page's own thread, outside the queue (each pass takes
         the model's lock; the queue's worker gets the lock between two of them, when the lock lets it)
  whole  as Compare models and the batching sweep ran before: one whole job in the queue
  long   as now: a long job of chunks in the queue (RunQueue.submit_long), run behind people's questions

  TPE_CACHE_DIR=... .venv/bin/python bench/long_job_wait.py [--modes page whole long] [--questions 4] [--gap 20]

The real queue and trace engine on the real SmolLM2, wired as the app wires them (pipeline/server/wiring.py),
OpenMP waiting passively as in the app's server. The default question patched against "Are carrots fruit?" (the page's
default). Questions of the room arrive `--first` s after the patching starts, then every `--gap` s (16 new tokens
each); per question, from the queue's schedule record: its wait (arrival to the start of its prefill), its TTFT
and its end to end (arrival to its last token); and the patching's own time, its chunks' times.
"""
from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from dataclasses import replace

QUESTIONS = ["What is the capital of France?", "Name three primary colours.", "Why is the sky blue?",
             "How many legs has a spider?", "What is two plus two?", "Who wrote Hamlet?"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", nargs="+", default=["page", "whole", "long"], choices=["page", "whole", "long"])
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--first", type=float, default=10.0)
    ap.add_argument("--gap", type=float, default=20.0)
    ap.add_argument("--weights", default="fp32")
    args = ap.parse_args()
    from pipeline.server.process import wait_passively

    wait_passively()  # as the app's server does, before torch loads (spinning waits beside busy processes: 7x)
    from pipeline.attribution import interventions as iv
    from pipeline.core.long_jobs import run_to_end
    from pipeline.model.handle import ModelHandle
    from pipeline.server.run_queue import cost_of
    from pipeline.server.wiring import server_queue
    from pipeline.stages.request import ChatRequest, GenerationOptions
    from pipeline.stages.tokens import tokenize_request

    lm = ModelHandle(weights=args.weights)
    lm.model  # noqa: B018 - loaded first, as the server's warm-up does
    clean_request = ChatRequest.from_question("Are tomatoes fruit?", weights=args.weights)
    clean = tokenize_request(lm.tokenizer, clean_request).ids
    bad = tokenize_request(lm.tokenizer, replace(clean_request, messages=clean_request.messages[:-1]
                                                 + (("user", "Are carrots fruit?"),))).ids
    positions = list(range(max(0, len(clean) - 48), len(clean)))
    print(f"SmolLM2 {args.weights}, {len(clean)} prompt tokens, {lm.dims.L + 1} layers patched x "
          f"{len(positions)} positions; load {os.getloadavg()[0]:.1f}", flush=True)

    for mode in args.modes:
        queue = server_queue(lambda request: lm, 4096)  # as the app wires it
        warm = ChatRequest.from_question("Hello!", weights=args.weights,
                                         options=GenerationOptions(max_new_tokens=4))
        queue.submit("warm", lambda: None, 1, batch=("trace", ("warm", warm, time.perf_counter()))).result()
        t0 = time.perf_counter()
        done = threading.Event()
        if mode == "page":
            threading.Thread(target=lambda: (iv.patch_residual(lm, clean, bad, positions), done.set())).start()
        elif mode == "whole":
            queue.submit("patch", lambda: run_to_end(iv.patch_residual_steps(lm, clean, bad, positions)),
                         cost=1).add_done_callback(lambda _: done.set())
        else:
            queue.submit_long("patch", lambda: iv.patch_residual_steps(lm, clean, bad, positions),
                              asker="bench").add_done_callback(lambda _: done.set())
        tickets = []
        for n in range(args.questions):
            time.sleep(max(0.0, t0 + args.first + n * args.gap - time.perf_counter()))
            request = ChatRequest.from_question(QUESTIONS[n % len(QUESTIONS)], weights=args.weights,
                                                options=GenerationOptions(max_new_tokens=16))
            prompt = len(tokenize_request(lm.tokenizer, request).ids)
            tickets.append(queue.submit(("q", n), lambda: None, cost_of(prompt, 16), prompt,
                                        batch=("trace", (("q", n), request, time.perf_counter()))))
        for t in tickets:
            t.result()
        done.wait()
        patch_s = time.perf_counter() - t0
        sched = queue.schedule()
        rows = [r for r in sched["requests"] if isinstance(r["key"], tuple)]
        waits = [r["prefill_at_s"] - r["queued_s"] for r in rows]
        ttfts = [r["ttft_s"] for r in rows]
        chunks = [c["seconds"] for c in sched["chunks"]]
        print(f"{mode:>5}: patching {patch_s:6.1f} s; questions' wait " + ", ".join(f"{w:.1f}" for w in waits)
              + f" s (max {max(waits):.1f}); TTFT " + ", ".join(f"{t:.1f}" for t in ttfts)
              + "; end to end " + ", ".join(f"{r['left_s'] - r['queued_s']:.1f}" for r in rows)
              + (f" s; {len(chunks)} chunks, median {statistics.median(chunks):.2f} s, p90 "
                 f"{sorted(chunks)[int(0.9 * (len(chunks) - 1))]:.2f} s, max {max(chunks):.2f} s (chunk "
                 f"{chunks.index(max(chunks))})" if chunks else " s") + f"; load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
