"""Where the server's CPU goes when a room of new questions arrives, without the browsers or Streamlit.

Drives the real queue and trace engine, wired as the app wires them (pipeline/server/wiring.py: a RunQueue
with a TraceEngine whose finished runs go to a RunStore with its disk store), on the real SmolLM2: N distinct
questions arriving `--gap` s apart (bench/workshop_load.py's questions and spacing). Prints the
process's CPU-seconds per part (exclusive: a part's own time, not its children's): each request's
captured prefill, the decode steps' forward passes by batch size, choosing and recording each token,
the join/leave cache rebuilds, the Trace assembly, storing the run, the rest of the worker. Also, with
--page K, what drawing the Journey page of K of those runs costs (AppTest, in this process).

    TPE_CACHE_DIR=... .venv/bin/python bench/room_cpu.py [--sessions 30] [--gap 0.3] [--page 3] [--cprofile 25]
        [--weights bf16]

CPU-seconds (time.process_time: every thread of this process, torch's included) rather than wall
seconds, since the machine is shared; the script itself only sleeps while the queue works.
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

from workshop_load import QUESTIONS  # bench/ is this script's folder

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as ./run.sh app starts the server


class Parts:
    """Exclusive CPU-seconds per named part, nested parts subtracted from their parent."""

    def __init__(self):
        self.total = defaultdict(float)
        self.samples = defaultdict(list)
        self.local = threading.local()  # each thread's stack of open parts: [name, start, children's time]
        self.lock = threading.Lock()

    @contextlib.contextmanager
    def part(self, name: str):
        """A part's CPU is the whole process's while it runs: parts on the queue's worker and the finisher
        thread that overlap both count the time they share."""
        stack = self.local.__dict__.setdefault("stack", [])
        entry = [name, time.process_time(), 0.0]
        stack.append(entry)
        try:
            yield
        finally:
            took = time.process_time() - entry[1]
            stack.pop()
            if stack:
                stack[-1][2] += took
            own = took - entry[2]
            with self.lock:
                self.total[name] += own
                self.samples[name].append(own)

    def wrap(self, owner, attr: str, name):
        """Time owner.attr (name: a string, or a function of the call's arguments giving one)."""
        original = getattr(owner, attr)

        def timed(*args, **kwargs):
            with self.part(name(*args, **kwargs) if callable(name) else name):
                return original(*args, **kwargs)
        setattr(owner, attr, timed)


def instrument(parts: Parts) -> None:
    from pipeline.model.handle import ModelHandle
    from pipeline.run import trace as trace_module
    from pipeline.server.run_queue import RunQueue
    from pipeline.stages.batched_decoding import BatchDecoder
    from pipeline.stages.generation import Answer
    from pipeline.stages.graphed_batch_decoding import GraphedBatchDecoder

    parts.wrap(RunQueue, "_start", "queue: admit (tokenize, Answer, join)")
    parts.wrap(RunQueue, "_step", "queue: step (the rest)")
    parts.wrap(trace_module, "prefill_request", "captured prefill")
    parts.wrap(trace_module, "prefill_together", "captured prefill (arrivals together)")
    # the static batched step (CUDA) runs its pass inside this part: ModelHandle.forward below is HF's forward only
    parts.wrap(BatchDecoder, "step", lambda self: f"decode step, rest (B={len(self.rows):>2})")
    for owner in (BatchDecoder, GraphedBatchDecoder):  # the joined cache made anew, or the rows moved in a bucket
        if "_merge" in vars(owner):
            static = " in the static bucket" if owner is GraphedBatchDecoder else ""
            parts.wrap(owner, "_merge", f"joined cache: merge (join/leave){static}")
    parts.wrap(Answer, "choose", "choose + record a token")
    parts.wrap(Answer, "result", "Decode assembly")
    parts.wrap(trace_module, "_finish", "Trace assembly")
    forward = ModelHandle.forward

    def timed_forward(self, input_ids, *args, **kwargs):
        rows = len(input_ids) if isinstance(input_ids, list) else int(input_ids.shape[0])
        width = len(input_ids[0]) if isinstance(input_ids, list) else int(input_ids.shape[1])
        name = f"decode forward (B={rows:>2})" if width == 1 else "prefill forward"
        with parts.part(name):
            return forward(self, input_ids, *args, **kwargs)
    ModelHandle.forward = timed_forward


def run_room(sessions: int, gap: float, store_dir: Path, parts: Parts, profile: cProfile.Profile | None,
             weights: str = "fp32", inline: bool = False):
    from pipeline.model.handle import ModelHandle
    from pipeline.server.run_queue import RunQueue, cost_of
    from pipeline.server.wiring import finished_runs, server_queue
    from pipeline.stages.request import ChatRequest
    from pipeline.stages.tokens import tokenize_request

    lm = ModelHandle(weights=weights)
    lm.model  # noqa: B018 - loaded before the room arrives, as the server's warm-up does
    store = finished_runs(store_dir)

    def on_trace(key, trace):
        with parts.part("store the run (memory + disk)"):
            store.put(key, trace)
    queue = server_queue(lambda request: lm, 4096, on_trace=on_trace, finish_inline=inline)  # as the app wires it
    if profile is not None:  # cProfile sees the worker thread only through its two entry points
        for attr in ("_start", "_step"):
            original = getattr(RunQueue, attr)

            def profiled(self, *a, _original=original, **k):
                return profile.runcall(_original, self, *a, **k)
            setattr(RunQueue, attr, profiled)
    # one request first, as the server's warm-up does (first passes allocate)
    warm = ChatRequest.from_question("Hello!", weights=weights)
    queue.submit("warm", lambda: None, 1, batch=("trace", ("warm", warm, time.perf_counter()))).result()
    parts.total.clear()
    parts.samples.clear()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    tickets, told = [], {}  # told: seconds from each request's arrival to its caller holding the Trace
    for n in range(sessions):
        request = ChatRequest.from_question(QUESTIONS[n % len(QUESTIONS)] + ("" if n < len(QUESTIONS) else f" ({n})"),
                                             weights=weights)
        prompt = len(tokenize_request(lm.tokenizer, request).ids)
        arrived = time.perf_counter()
        tickets.append(queue.submit(n, lambda: None, cost_of(prompt, request.options.max_new_tokens), prompt,
                                    batch=("trace", (n, request, arrived))))
        tickets[-1].add_done_callback(lambda _, n=n, t=arrived: told.__setitem__(n, time.perf_counter() - t))
        time.sleep(gap)
    traces = [t.result() for t in tickets]
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return lm, queue, traces, cpu, wall, sorted(told.values())


def page_cost(traces, k: int) -> list[float]:
    """CPU-seconds of one Journey page run (AppTest) drawing each of k stored runs."""
    from streamlit.testing.v1 import AppTest

    root = Path(__file__).resolve().parents[1]
    out = []
    for trace in traces[:k]:
        question = trace.request.openai["messages"][-1]["content"]
        at = AppTest.from_file(str(root / "views" / "pages" / "journey.py"), default_timeout=120)
        at.session_state["req_question"] = question
        at.run()  # the first run computes (or finds) the run
        t = time.process_time()
        at.run()  # a second run only draws it: what each learner's page costs the server
        out.append(time.process_time() - t)
        if at.exception:
            raise RuntimeError(at.exception[0].message)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--gap", type=float, default=0.3)
    ap.add_argument("--page", type=int, default=0, help="also draw the Journey page of this many runs")
    ap.add_argument("--cprofile", type=int, default=0, help="print the top N functions (cumulative) of the worker")
    ap.add_argument("--weights", default="fp32", help="the weight format every request runs on: fp32, bf16, int8")
    ap.add_argument("--finish-inline", action="store_true",
                    help="assemble and store each run in the decode step instead of on the finisher thread")
    args = ap.parse_args()

    parts = Parts()
    instrument(parts)
    profile = cProfile.Profile() if args.cprofile else None
    with tempfile.TemporaryDirectory(dir=os.environ.get("TPE_CACHE_DIR")) as store_dir:
        lm, queue, traces, cpu, wall, told = run_room(args.sessions, args.gap, Path(store_dir), parts, profile,
                                                 args.weights, args.finish_inline)
    requests = queue.schedule()["requests"][-args.sessions:]
    ttft = sorted(r["ttft_s"] for r in requests)
    done = sorted(r["left_s"] - r["queued_s"] for r in requests)
    steps = parts.samples["queue: step (the rest)"]  # the room's steps (the warm-up's are cleared)
    print(f"{args.sessions} requests {args.gap} s apart on {lm.name} ({args.weights}): {cpu:.1f} CPU-s in "
          f"{wall:.1f} s wall (load average {os.getloadavg()[0]:.1f}); {len(steps)} decode steps; "
          f"{sum(len(t.decode.generated_ids) for t in traces)} tokens")
    print(f"  TTFT p50 {statistics.median(ttft):.1f} s, p95 {ttft[int(0.95 * (len(ttft) - 1))]:.1f} s; "
          f"answer done p50 {statistics.median(done):.1f} s, p95 {done[int(0.95 * (len(done) - 1))]:.1f} s; "
          f"caller holds its run p50 {statistics.median(told):.1f} s, p95 {told[int(0.95 * (len(told) - 1))]:.1f} s")
    counted = sum(parts.total.values())
    print(f"\n{'part':44} {'CPU-s':>7} {'share':>6} {'calls':>6} {'median ms':>10}")
    for name, total in sorted(parts.total.items(), key=lambda kv: -kv[1]):
        s = parts.samples[name]
        print(f"{name:44} {total:7.2f} {total / cpu:6.1%} {len(s):6d} {statistics.median(s) * 1e3:10.1f}")
    print(f"{'outside the parts (waiting thread, GC, ...)':44} {cpu - counted:7.2f} {(cpu - counted) / cpu:6.1%}")
    if profile is not None:
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(args.cprofile)
        print("\n" + "\n".join(text.getvalue().splitlines()[4:]))
    if args.page:
        costs = page_cost(traces, args.page)
        print(f"\nJourney page drawing a stored run (AppTest, second run): median {statistics.median(costs):.2f} "
              f"CPU-s ({min(costs):.2f}-{max(costs):.2f}) over {len(costs)} runs")


if __name__ == "__main__":
    main()
