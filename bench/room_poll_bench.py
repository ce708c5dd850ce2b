"""A room of 30 answers one poll: every answer counted once, no error, within 10 s.

  .venv/bin/python bench/room_poll_bench.py [--learners 30] [--replicas 2] [--folder DIR] [--store redis://...]

The presenter's process makes a room in a fresh room folder (or --folder: a shared one, e.g. the NFS folder of a
room on several hosts) and opens a `tokens` poll. Then `--replicas` processes, each with its own store on that folder
(as the app's replicas behind HAProxy), answer for `--learners` learner sessions at once, each session answering
twice (its second answer replaces its first), the sessions spread over the replicas the way HAProxy spreads them
(each session's second answer on the other replica, as after a replica restart). Meanwhile the presenter counts
"N answered" every 0.2 s, as the page's 3-second watch does. Printed: the time until every answer is in, each
answer's latency (p50, p95, max), errors, and whether Reveal's frozen answers are exactly the second answers, one per
session. Exits 1 if an answer is lost or counted twice, an error happened, or it took over 10 s.
--store URL: the room in that Redis (TPE_STORE, as `./run.sh room-host --store` gives every host's replicas), each
replica process on a folder of its own, as on several hosts: only Redis joins them.

  .venv/bin/python bench/room_poll_bench.py --server [--learners 30] [--rounds 2]

--server: the same room on a real server (server.py started here on its own store of runs, as
bench/api_beside_learners.py starts it; SmolLM2, the server's default model), learners asking new questions while a
poll is open. Rounds interleaved (round r "without" then "with", the next the other way round): every round each of
the learners asks a new question on Journey over Streamlit's websocket (the room bench's learner, 0.3 s apart, timed
to the page's end), and at the same time opens its follow page (presenter?follow=CODE), as a room's learners do
whether or not a poll is open; in a "with" round the presenter has just opened a poll, the follow page draws it and
the learner answers through the poll store, as that page's form does. (Before 2026-12-06 19:49 only the "with"
rounds opened the follow pages, so their p95 also paid for 30 page runs that the "without" rounds never made.)
Printed: the learners' time to a new question's answer, p50 and p95 per round and their median over the rounds with
the range, per side, and the ratio of the p95s with / without; per poll: answers counted (each learner once),
Reveal's frozen answers, errors, and the time until all answers were in after the poll opened.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pipeline.server.polls.store import PollStore
from pipeline.server.room import RoomStore
from pipeline.server.store.shared import STORE_ENV

LIMIT_S = 10.0  # the target: a room of 30 answers within 10 s


def replica(folder: str, code: str, poll_id: str, rounds: list[list[tuple[str, str]]], start: float, barrier,
            out, store_url: str | None = None) -> None:
    """One replica's process: answers for its sessions, round by round (a learner's second answer comes after their
    first was taken, on whichever replica); (latencies, errors) sent back. store_url: the room's Redis (TPE_STORE)."""
    if store_url:
        os.environ[STORE_ENV] = store_url
    store = PollStore(RoomStore(Path(folder)))
    while time.time() < start:
        time.sleep(0.001)
    latencies, errors = [], []
    for sessions in rounds:
        for session, answer in sessions:
            t0 = time.perf_counter()
            try:
                store.answer(code, poll_id, session, answer)
            except Exception as e:  # noqa: BLE001 - counted and printed
                errors.append(f"{type(e).__name__}: {e}")
            latencies.append(time.perf_counter() - t0)
        barrier.wait()
    out.put((latencies, errors))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--learners", type=int, default=30)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--folder", help="the room folder (default: a fresh temporary one)")
    ap.add_argument("--store", help="a redis:// URL: the room in that Redis, each replica on a folder of its own")
    ap.add_argument("--server", action="store_true", help="learners asking new questions on a real server, rounds "
                    "with and without a poll that all of them answer")
    ap.add_argument("--rounds", type=int, default=2, help="with --server: rounds of each side (default 2)")
    ap.add_argument("--timeout", type=float, default=300.0, help="with --server: per page, seconds")
    args = ap.parse_args()
    if args.server:
        from room_poll_server import run_on_server  # bench/ is this script's folder

        return run_on_server(args.learners, args.rounds, args.timeout)
    folder = Path(args.folder or tempfile.mkdtemp(prefix="room-poll-bench-"))
    if args.store:
        os.environ[STORE_ENV] = args.store
    rooms = RoomStore(folder)
    code, key, _ = rooms.create_room(3, {"q": "How many tokens?"}, driver="bench")
    polls = PollStore(rooms)
    poll = polls.open_poll(code, key, "tokens", "How many tokens is this prompt?", {"q": "How many tokens?"}, 3,
                           real={"count": 30, "answer": "30", "tokens": []})
    first = {f"learner-{n}": str(10 + n) for n in range(args.learners)}  # each session's first answer
    final = {s: str(int(a) + 1000) for s, a in first.items()}  # and the one that replaces it
    work = [[[], []] for _ in range(args.replicas)]  # per replica: its first answers, then its second answers
    for n, session in enumerate(first):
        work[n % args.replicas][0].append((session, first[session]))
        work[(n + 1) % args.replicas][1].append((session, final[session]))  # the second answer on another replica
    ctx = multiprocessing.get_context("spawn")
    out, barrier = ctx.Queue(), ctx.Barrier(args.replicas)
    start = time.time() + 3.0  # every process started before the first answer
    homes = [folder / f"host-{i}" if args.store else folder for i in range(args.replicas)]  # Redis: hosts apart
    procs = [ctx.Process(target=replica, args=(str(home), code, poll.id, w, start, barrier, out, args.store))
             for home, w in zip(homes, work)]
    for p in procs:
        p.start()
    counts = []
    while time.time() < start:
        time.sleep(0.01)
    while any(p.is_alive() for p in procs) or out.empty():
        counts.append(polls.count(code, poll.id))  # the presenter's live count
        if time.time() - start > 60:
            break
        time.sleep(0.2)
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join()
    done_s = time.time() - start
    latencies = sorted(x for lat, _ in results for x in lat)
    errors = [e for _, errs in results for e in errs]
    counted = polls.count(code, poll.id)
    frozen = sorted(polls.reveal(code, key, poll.id).revealed_answers)
    exact = frozen == sorted(final.values())
    p95 = latencies[int(0.95 * (len(latencies) - 1))]
    print(f"room store: {rooms.files.where}")
    print(f"{args.learners} learners, {args.replicas} replicas, {len(latencies)} answers (each learner twice): all in "
          f"{done_s:.2f} s after the start")
    print(f"answer latency: p50 {statistics.median(latencies) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, "
          f"max {latencies[-1] * 1000:.1f} ms; errors: {len(errors)}")
    print(f"counted {counted} (expected {args.learners}); the presenter's count went {counts[:1]} -> {counts[-1:]} "
          f"over {len(counts)} looks; Reveal froze {len(frozen)} answers, each learner's second: {exact}")
    for e in errors[:5]:
        print("  error:", e)
    ok = counted == args.learners and not errors and exact and done_s <= LIMIT_S
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
