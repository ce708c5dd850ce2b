"""The record of what the run queue did lately: each decode step's batch, each request's TTFT and TPOT,
each long job's chunks (what Prefill & decode's schedule chart draws).

A request's TTFT and TPOT are measured here, on the queue's clock (pipeline.costs.named_time.served_times): from
its ticket's arrival in the line to the end of the step that made its first token, and the mean gap between the
ends of its steps after that one. What `stepped` returns for the requests that left is what their engine records
on their Trace, so the schedule and the stored run show the same figures."""
from __future__ import annotations

import logging
import time
from collections import deque
from typing import Callable

from pipeline.costs.named_time import served_times
from pipeline.server.tickets import LongTicket, Ticket

log = logging.getLogger("pipeline.server.run_queue")  # the queue's log: these lines are its record

SCHEDULE_STEPS = 2000  # decode steps the schedule record keeps (the oldest go first)
SCHEDULE_REQUESTS = 200  # requests it keeps
SCHEDULE_CHUNKS = 2000  # long jobs' chunks it keeps
NOT_SAID = {"prefill_path": None, "decode_path": None, "device": None, "model": None}  # an engine that names none


def served_by(engine, handle) -> dict:
    """{prefill_path, decode_path, device, model} of a request the engine started (its served_by; None each where the
    engine has none): the schedule's times are named by them."""
    said = getattr(engine, "served_by", None)
    try:
        return dict(NOT_SAID) if said is None else {**NOT_SAID, **said(handle)}
    except Exception:  # the record goes without its names; the request is served all the same
        log.exception("the engine could not say what served a request")
        return dict(NOT_SAID)


class Schedule:
    """What the running batch did, bounded: per step the requests in it; per request when it was
    queued, prefilled, joined, got its first token and left (times in seconds since the queue started)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.t0 = clock()
        self.steps: deque[dict] = deque(maxlen=SCHEDULE_STEPS)  # {step, t_s, seconds, members: [rid]}
        self.chunks: deque[dict] = deque(maxlen=SCHEDULE_CHUNKS)  # {key, chunk, at_s, seconds}: long jobs' chunks
        self.requests: dict[int, dict] = {}  # rid -> record, in arrival order
        self.count = 0  # steps so far
        self.admissions = 0  # requests so far: each one's anonymous number

    def now(self) -> float:
        return round(self.clock() - self.t0, 4)

    def chunk_ran(self, ticket: LongTicket, started: float, seconds: float) -> None:
        self.chunks.append({"key": ticket.key, "chunk": ticket.chunks, "at_s": round(started - self.t0, 4),
                            "seconds": round(seconds, 4)})

    def admitted(self, ticket: Ticket, prefill_started: float, prefill_s: float, served: dict = NOT_SAID) -> int:
        """served: the paths and device that ran it (served_by)."""
        self.admissions += 1
        rid = self.admissions
        self.requests[rid] = {"id": rid, "key": ticket.key, "queued_s": round(ticket.submitted_at - self.t0, 4),
                              "prefill_s": round(prefill_s, 4), "prefill_at_s": round(prefill_started - self.t0, 4),
                              "joined_step": self.count, "first_step": None, "first_token_s": None, "left_step": None,
                              "left_s": None, "tokens": 0, "ttft_s": None, "tpot_s": None,
                              "first_after_prefill_s": None, "first_step_s": None, "batch_at_join": None,
                              "arrived_at": ticket.submitted_at, "first_token_at": None,  # the clock's own readings
                              **NOT_SAID, **served}
        while len(self.requests) > SCHEDULE_REQUESTS:
            self.requests.pop(next(iter(self.requests)))
        return rid

    def stepped(self, members: list[int], seconds: float, left: list[int]) -> dict[int, dict]:
        """A decode step of `members` ended now, taking `seconds`; `left` ended with it. Returns, for each of them,
        how it was served: {ttft_s, tpot_s, total_s, prefill_path, decode_path, device} (what its Trace records)."""
        at = self.clock()
        t = round(at - self.t0, 4)
        self.steps.append({"step": self.count, "t_s": t, "seconds": round(seconds, 4), "members": list(members)})
        out = {}
        for rid in members:
            r = self.requests.get(rid)
            if r is None:
                continue
            r["tokens"] += 1
            if r["first_step"] is None:
                r["first_step"], r["first_token_s"], r["first_token_at"] = self.count, t, at
                r["ttft_s"] = served_times(r["arrived_at"], at, at, 1)[0]
                # from the end of its own prefill to its first token: other prefills admitted with it + one step
                r["first_after_prefill_s"] = round(t - r["prefill_at_s"] - r["prefill_s"], 4)
                r["first_step_s"], r["batch_at_join"] = round(seconds, 4), len(members)
            if rid in left:
                r["left_step"], r["left_s"] = self.count, t
                r["ttft_s"], r["tpot_s"] = served_times(r["arrived_at"], r["first_token_at"], at, r["tokens"])
                out[rid] = {"ttft_s": r["ttft_s"], "tpot_s": r["tpot_s"], "total_s": at - r["arrived_at"],
                            **{k: r[k] for k in NOT_SAID}}
                log.info("request %d left: waited %.2f s, prefill %.2f s, first token %.2f s after its prefill "
                         "(that step %.2f s, batch of %d), %d tokens, TTFT %.2f s, TPOT %s", rid,
                         r["prefill_at_s"] - r["queued_s"], r["prefill_s"], r["first_after_prefill_s"],
                         r["first_step_s"], r["batch_at_join"], r["tokens"], r["ttft_s"],
                         "-" if r["tpot_s"] is None else f"{r['tpot_s'] * 1000:.0f} ms")
        self.count += 1
        return out

    def as_data(self) -> dict:
        return {"steps": [dict(s) for s in self.steps], "requests": [dict(r) for r in self.requests.values()],
                "chunks": [dict(c) for c in self.chunks]}
