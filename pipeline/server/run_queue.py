"""Requests wait in arrival order in front of the model; each caller can see its place and an estimate.

One worker thread serves the line (the model runs one pass at a time anyway, so a second worker
would only interleave, not speed up). Identical requests share one ticket. A long prompt is refused
while the queue is long, so one learner's 8,000-token prompt cannot make the whole room wait.

Jobs of a kind that has a step engine (chat requests: `engines={"trace": ...}`) are scheduled per
decode step, as vLLM and Orca do (continuous batching): between two steps the worker runs the
prefill of the requests at the head of the line (up to PREFILL_TOKENS_PER_STEP prompt tokens, at
least one request; an engine with start_together prefills them in one batched pass), they join the
running batch at the next step, and each request leaves the batch
at its own end token: its ticket resolves then, not when the batch ends (an engine that finishes the
record on a thread of its own hands back a Future: the ticket resolves when that does). A KV-memory budget in bytes
decides admission: each request reserves the bytes its cache reaches at its longest (prompt +
max_new_tokens), and the head of the line waits while the budget is full (later ones do not overtake).
A kind given a share (the API's streams, each stepped in a pass of its own: wiring's API_STREAM_SHARE) steps only
while it owes the other kinds in the batch no time (pipeline.server.kind_shares), so a room's learners keep their
pace beside them. Any other job runs whole, in its turn, between two steps. Background jobs run only when nobody waits,
no batch is running and no long job is left.

A long job (`submit_long`: activation patching, comparing models, the batching sweep) is a generator of short
chunks that takes turns with people's questions, a chunk in a gap (pipeline.server.long_job_turns). Its ticket
tells its progress; the people who asked for it can withdraw, and once nobody is left it stops between two chunks.

    queue = RunQueue()
    ticket = queue.submit("key", work, cost=500)   # cost: prompt tokens + a weight per new token
    ticket.position()  -> 2  (two jobs ahead; 0 = running now)
    ticket.wait(0.5); ticket.result()          # a concurrent.futures.Future: done(), exception(), ...
    queue.schedule()                           # the recent steps: who was in the batch, TTFT, TPOT
    long = queue.submit_long("key", lambda: steps(), asker="session 1")   # steps(): yields Progress, returns
    long.progress; long.withdraw("session 1")  # -> True: nobody else wants it, it stops between two chunks
"""
from __future__ import annotations

import logging
import statistics
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Callable, Hashable

from pipeline.core.checks import integer
from pipeline.core.errors import InputError
from pipeline.core.long_jobs import Steps
from pipeline.server.kind_shares import KindShares
from pipeline.server.long_job_turns import LONG_JOB_SHARE, LongJobTurns
from pipeline.server.schedule import Schedule, served_by
from pipeline.server.tickets import LongTicket, StepEngine, Ticket, as_future, held_if_admitted

log = logging.getLogger(__name__)

DECODE_STEP_COST = 15  # one decode step costs about as much as 15 prompt tokens of prefill on a CPU
LONG_PROMPT_TOKENS = 1024  # prompts longer than this are refused while the queue is long
LONG_QUEUE = 4  # "long": this many jobs already waiting
MAX_BATCH = 32  # requests decoded together at most
# Prompt tokens prefilled between two decode steps (at least one request). The requests admitted in one gap are
# prefilled in one batched pass (TraceEngine.start_together), cheaper than one by one (SmolLM2 bf16 on two CPU
# cores: 4 room questions of ~36 tokens in 0.21 s against 0.10 s for one): 256 lets ~7 of them share a pass.
PREFILL_TOKENS_PER_STEP = 256
KV_BUDGET_BYTES = 512 * 2**20  # KV memory the running batch may reserve


def cost_of(prompt_tokens: int, new_tokens: int) -> int:
    """Work units of a request: 34 prompt tokens + 64 new tokens -> 34 + 64 * 15 = 994."""
    prompt_tokens = integer("prompt_tokens", prompt_tokens, 0, 10**9)
    return prompt_tokens + DECODE_STEP_COST * integer("new_tokens", new_tokens, 0, 10**9)


class RunQueue:
    def __init__(self, seconds_per_unit: float = 0.005, engines: dict[str, StepEngine] | None = None,
                 kv_budget_bytes: int = KV_BUDGET_BYTES, max_batch: int = MAX_BATCH,
                 prefill_tokens_per_step: int = PREFILL_TOKENS_PER_STEP, long_job_share: float = LONG_JOB_SHARE,
                 clock: Callable[[], float] = time.monotonic, shares: dict[str, float] | None = None):
        """engines: {kind: StepEngine} for jobs decoded together, step by step (chat requests). clock: the
        seconds the queue reads (a test may give its own, advanced by its fake work). shares: {kind: share} of the
        model's time a kind gets at most while another kind is in the batch (pipeline.server.kind_shares)."""
        self.clock = clock
        self.engines = engines or {}
        self.kv_budget_bytes, self.max_batch = kv_budget_bytes, max_batch
        self.prefill_tokens_per_step = prefill_tokens_per_step
        self._waiting: deque[Ticket] = deque()
        self._background: deque[Ticket] = deque()  # served only when nobody is waiting
        self._running: Ticket | None = None  # a whole job running now
        self._members: dict[tuple[str, Hashable], Ticket] = {}  # (kind, engine handle) -> ticket in the batch
        self._by_key: dict[Hashable, Ticket] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._speeds: deque[float] = deque([seconds_per_unit], maxlen=20)  # seconds per work unit
        self._running_since = 0.0
        self._schedule = Schedule(clock)
        self._long = LongJobTurns(self._lock, clock, self._schedule, self._done, long_job_share)
        self._shares = KindShares(shares or {})  # used by the worker thread alone
        self.completed = 0
        threading.Thread(target=self._serve, name="run-queue", daemon=True).start()

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiting) + self._busy()

    def _busy(self) -> int:
        """1 while a job, a long job's chunk or a batch is running. Lock held."""
        return int(self._running is not None or self._long.running is not None or bool(self._members))

    def submit(self, key: Hashable, work: Callable[[], object], cost: int | None = None, prompt_tokens: int = 0,
               background: bool = False, batch: tuple[str, object] | None = None) -> Ticket:
        """Queue `work` (or join the identical queued job). background=True: preparation that runs only
        while nobody is waiting; a person asking for the same key brings it forward. batch=(kind, payload):
        a kind with a step engine is decoded in the running batch (then `work` is not called), and the engine
        prices it (cost None: the server prices what it admits; a page only submits). Other work gives its cost."""
        if cost is None:
            if batch is None or batch[0] not in self.engines:
                raise ValueError("a job without a step engine gives its cost")
            cost, prompt_tokens = self.engines[batch[0]].price(batch[1])  # tokenizes: outside the lock
        with self._lock:
            if key in self._by_key:
                ticket = self._by_key[key]  # the same request is already queued or running
                if not background and ticket in self._background:
                    self._background.remove(ticket)
                    self._waiting.append(ticket)
                return ticket
            waiting = len(self._waiting) + self._busy()
            if prompt_tokens > LONG_PROMPT_TOKENS and waiting >= LONG_QUEUE:
                raise InputError("messages", f"{waiting} requests are waiting for the model; while the queue is this "
                                             f"long, prompts over {LONG_PROMPT_TOKENS:,} tokens are refused so that "
                                             f"everyone gets a turn. Try again in a minute, or shorten it "
                                             f"({prompt_tokens:,} tokens now).")
            ticket = Ticket(self, key, work, cost, batch)
            self._by_key[key] = ticket
            (self._background if background else self._waiting).append(ticket)
            queued = len(self._waiting) + self._busy()  # the figure the long-prompt rule reads, this job in
            self._wake.notify()
        if not background:  # said outside the lock: the log's write never holds up the worker
            log.info("a job came in; %d in the queue", queued)
        return ticket

    def submit_long(self, key: Hashable, steps: Callable[[], Steps], asker: Hashable) -> LongTicket:
        """Queue a long job: `steps()` makes its generator of chunks (pipeline.core.long_jobs), called at its first
        chunk in the worker. The same key already queued or running: `asker` joins that ticket (one run for
        everyone: LongJobTurns.ask)."""
        with self._lock:
            ticket = self._by_key.get(key)
            if ticket is None:
                ticket = self._by_key[key] = LongTicket(self, key, steps)
                self._long.line.append(ticket)
                self._wake.notify()
            if isinstance(ticket, LongTicket):
                self._long.ask(ticket, asker)
            return ticket

    def withdraw(self, ticket: LongTicket, asker: Hashable) -> bool:
        """LongJobTurns.withdraw under the queue's lock, the worker woken when the job is to stop."""
        with self._lock:
            if not self._long.withdraw(ticket, asker):
                return False
            self._wake.notify()
            return True

    def long_jobs(self) -> list[LongTicket]:
        """The long jobs queued or running now, the next to run a chunk first."""
        with self._lock:
            return list(self._long.line)

    def position(self, ticket: Ticket) -> int:
        with self._lock:
            if ticket is self._running or ticket in self._members.values() or ticket.done():
                return 0
            line = list(self._waiting) + list(self._background)
            return line.index(ticket) + self._busy() if ticket in line else 0

    def estimate_s(self, ticket: Ticket) -> float | None:
        """The work of everything running and ahead of it, and its own, at the recent seconds per unit; a long job's
        by LongJobTurns.left_s."""
        with self._lock:
            if isinstance(ticket, LongTicket):
                return self._long.left_s(ticket)
            speed = statistics.median(self._speeds)
            line = list(self._waiting) + list(self._background)
            ahead = line[:line.index(ticket) + 1] if ticket in line else []
            running = sum(t.cost for t in self._members.values())
            if self._running is not None:
                running += self._running.cost
            left = max(0.0, running * speed - (self.clock() - self._running_since)) + self._long.running_left_s()
            return left + sum(t.cost for t in ahead) * speed

    def schedule(self) -> dict:
        """The running batch's recent record as plain data: {"steps": [{step, t_s, seconds, members}],
        "requests": [{id, key, queued_s, prefill_at_s, prefill_s, joined_step, first_step, first_token_s,
        left_step, left_s, tokens, ttft_s, tpot_s, first_after_prefill_s, first_step_s, batch_at_join,
        prefill_path, decode_path, device}],
        "chunks": [{key, chunk, at_s, seconds}]} (ids are anonymous numbers; `key` is the request's or the long
        job's queue key; chunk: its number within its job)."""
        with self._lock:
            return self._schedule.as_data()

    # ---- the worker -------------------------------------------------------------------------------
    def _serve(self) -> None:
        while True:
            with self._lock:
                while not (self._waiting or self._background or self._members or self._long.line):
                    self._wake.wait()
                stopped = self._long.take_stopped()
                for ticket in stopped:
                    self._by_key.pop(ticket.key, None)
                job, admitted = self._next()
                chunk = None
                if job is not None:
                    self._running, self._running_since = job, self.clock()
                    job.set_running_or_notify_cancel()  # running() is True from here (never cancelled)
                elif not admitted and self._long.due(bool(self._members), bool(self._waiting)):
                    chunk = self._long.take_turn()
            for ticket in stopped:
                self._long.stop(ticket)
            if job is not None:
                self._run_whole(job)
                continue
            if chunk is not None:
                self._long.run_chunk(chunk)
                continue
            for kind, tickets in self._by_kind(admitted).items():
                together = len(tickets) > 1 and hasattr(self.engines[kind], "start_together")
                for group in [tickets] if together else [[ticket] for ticket in tickets]:
                    self._start(kind, group)
            if self._members:
                self._step()

    def _is_stepped(self, ticket: Ticket) -> bool:
        return ticket.batch is not None and ticket.batch[0] in self.engines

    def _next(self) -> tuple[Ticket | None, list[Ticket]]:
        """Lock held: a whole job to run now, or the stepped requests to prefill before the next step.
        Arrival order: a whole job at the head of the line runs before anyone behind it is admitted."""
        line = self._waiting
        if not line and not self._members and not self._long.line:
            line = self._background  # nobody waits, no batch runs, no long job is left: preparation may go
        if line and not self._is_stepped(line[0]):
            job = line.popleft()
            job.started_at = self.clock()
            return job, []
        admitted, tokens = [], 0
        while line and self._is_stepped(line[0]) and len(self._members) + len(admitted) < self.max_batch:
            head = line[0]
            try:
                prompt, kv = self.engines[head.batch[0]].reserve(head.batch[1])
            except BaseException as e:  # a request that cannot be measured cannot run: its caller hears why
                line.popleft()
                self._by_key.pop(head.key, None)
                head.set_running_or_notify_cancel()
                head._finish(error=e)
                continue
            first = not self._members and not admitted
            held = 0 if first else held_if_admitted(self.engines, [*self._members.values(), *admitted], head,
                                                    (prompt, kv))
            if not first and (held > self.kv_budget_bytes or (admitted and tokens + prompt >
                                                              self.prefill_tokens_per_step)):
                break  # the budget is full (or this step's prefill is): the head waits, nobody overtakes it
            line.popleft()
            head.started_at = self.clock()
            head.reserved = (prompt, kv)
            head.set_running_or_notify_cancel()
            admitted.append(head)
            tokens += prompt
        return None, admitted

    def _run_whole(self, ticket: Ticket) -> None:
        try:
            ticket._finish(result=ticket.context.run(ticket.work))
        except BaseException as e:  # handed to the caller, who shows it
            ticket._finish(error=e)
        took = self.clock() - self._running_since
        log.info("ran 1 job in %.1f s; %d waiting", took, len(self._waiting))
        with self._lock:
            if ticket.cost > 0 and ticket.exception() is None:
                self._speeds.append(took / ticket.cost)
            self._running = None
            self._done(ticket)

    def _done(self, ticket: Ticket) -> None:
        """Lock held."""
        self._by_key.pop(ticket.key, None)
        self.completed += 1

    @staticmethod
    def _by_kind(tickets: list[Ticket]) -> dict[str, list[Ticket]]:
        """Admitted tickets by engine kind, in arrival order within each."""
        kinds: dict[str, list[Ticket]] = {}
        for ticket in tickets:
            kinds.setdefault(ticket.batch[0], []).append(ticket)
        return kinds

    def _start(self, kind: str, tickets: list[Ticket]) -> None:
        """The prefills of requests of one kind admitted in the same gap, in the first one's caller's context: one
        request through the engine's start, several through its start_together (one batched pass where it can, with
        every one's context: their passes count for their own callers). Each joins the batch at the next step; a
        refused one's caller only hears why."""
        engine = self.engines[kind]
        t = self.clock()
        try:
            if len(tickets) == 1:
                results = [tickets[0].context.run(engine.start, tickets[0].batch[1])]
            else:
                results = tickets[0].context.run(engine.start_together, [tk.batch[1] for tk in tickets],
                                                 [tk.context for tk in tickets])
        except BaseException as e:  # refused (too long, ...), or the pass itself failed: every one of them hears it
            results = [e] * len(tickets)
        took = self.clock() - t
        refused = [(tk, r) for tk, r in zip(tickets, results) if isinstance(r, BaseException)]
        for ticket, error in refused:
            ticket._finish(error=error)
        with self._lock:
            for ticket, _ in refused:
                self._done(ticket)
            joined = [(tk, r) for tk, r in zip(tickets, results) if not isinstance(r, BaseException)]
            for ticket, handle in joined:
                self._running_since = self._running_since if self._members else t
                self._members[(kind, handle)] = ticket
                ticket.rid = self._schedule.admitted(ticket, t, took, served_by(engine, handle))
            self._shares.ran(kind, took, {k for k, _ in self._members} | {kind})
            prompt_tokens = sum(ticket.reserved[0] for ticket, _ in joined)
            if prompt_tokens:
                self._speeds.append(took / prompt_tokens)

    def _step(self) -> None:
        """One decode step of every engine with requests in the batch (a kind with a share only when it owes the
        others no time: pipeline.server.kind_shares); the ended ones leave."""
        t = self.clock()
        with self._lock:
            members = list(self._members.items())
        kinds = list(dict.fromkeys(k for (k, _), _ in members))
        due = [kind for kind in kinds if self._shares.may_step(kind, kinds)] or kinds
        members = [((k, h), ticket) for (k, h), ticket in members if k in due]
        ended: list[tuple[tuple[str, Hashable], object]] = []
        for kind in due:
            first = next(ticket for (k, _), ticket in members if k == kind)
            started = self.clock()
            try:
                ended += [((kind, handle), result) for handle, result in first.context.run(self.engines[kind].step)]
            except BaseException as e:  # the step itself failed: every request of that engine hears it
                log.exception("a decode step of kind %s failed", kind)
                ended += [((k, h), e) for (k, h), _ in members if k == kind]
            self._shares.ran(kind, self.clock() - started, kinds)
        took = self.clock() - t
        finishing: list[tuple[Ticket, object]] = []
        with self._lock:
            left = []
            for member, result in ended:
                ticket = self._members.pop(member, None)
                if ticket is None:
                    continue
                left.append(ticket.rid)  # it leaves the batch (and the KV budget) now ...
                finishing.append((ticket, result))
            served = self._schedule.stepped([ticket.rid for _, ticket in members], took, left)
            self._long.batch_stepped(took)
            self._speeds.append(took / (DECODE_STEP_COST * len(members)))
            if not self._members:
                log.info("the batch emptied; %d waiting", len(self._waiting))
        for ticket, result in finishing:  # outside the lock: a Future already done calls back at once
            record = as_future(result, served.get(ticket.rid))  # an Unfinished one is told how it was served
            record.add_done_callback(lambda f, ticket=ticket: self._finished_record(ticket, f))

    def _finished_record(self, ticket: Ticket, record: Future) -> None:
        """An engine's record of a request that left the batch is ready (or failed): its caller hears now."""
        error = record.exception()
        with self._lock:
            self._done(ticket)
        ticket._finish(error=error) if error is not None else ticket._finish(result=record.result())
