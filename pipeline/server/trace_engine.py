"""The queue's step engines (pipeline.server.tickets.StepEngine): chat requests decoded in a running batch
that requests join and leave between steps (continuous batching).

TraceEngine: captured runs. A request's prefill (with every capture) runs on its own when it is
admitted; its decode steps run in the batch, each step recording what the Trace needs (candidates,
scores, KV use, the batch size at that step). StreamEngine: plain streaming runs (the live answer):
their prefill on the plain path, their steps in the same schedule, each on its own preallocated
decoder (pipeline.model.decoders.plain holds one request's static cache, which does not pad into a
shared batch), so they take turns with the batch step by step instead of waiting for it to end.

    engine = TraceEngine(lambda request: lm, max_prompt_tokens=2048)
    queue = RunQueue(engines={"trace": engine})
    queue.submit(key, work, batch=("trace", (key, request, time.perf_counter())))  # priced by the engine
"""
from __future__ import annotations

import contextvars
import itertools
import threading
from concurrent.futures import Executor
from typing import Callable, Hashable

from pipeline.costs.ceilings import device_name
from pipeline.costs.named_time import BATCHED, CAPTURED, PLAIN
from pipeline.model.interface import LanguageModel
from pipeline.model.passes import counter_in, current_counter
from pipeline.model.past import Reuse
from pipeline.server.run_queue import cost_of
from pipeline.server.tickets import Unfinished
from pipeline.stages.request import ChatRequest
from pipeline.stages.tokens import tokenize_request


def kv_reserve(lm: LanguageModel, request: ChatRequest, prompt_tokens: int | None = None) -> tuple[int, int]:
    """(prompt tokens, the KV bytes the request holds at its longest: prompt + max_new_tokens positions in
    every layer, a sliding-window layer at most its window), from the model's dimensions."""
    from pipeline.stages.kv_cache import held_bytes

    n = len(tokenize_request(lm.tokenizer, request).ids) if prompt_tokens is None else prompt_tokens
    return n, sum(held_bytes(lm.dims, n + request.options.max_new_tokens))


PRICED_REQUESTS = 256  # prompt lengths an engine remembers (a request is priced, then reserved at admission)


class _Engine:
    """Requests of several models: one BatchDecoder per model, all stepped in one queue step."""

    prefill_path = PLAIN  # the path its prefills run on (pipeline.costs.named_time)

    def __init__(self, lm_for: Callable[[ChatRequest], LanguageModel], max_prompt_tokens: int | None = None,
                 static_batch: bool | None = None, reuse: Reuse | None = None):
        """static_batch: whether the batch steps through the static batched step (graphed_batch_decoding); None:
        where it is captured as CUDA graphs (CUDA) only; True: anywhere (a test runs it on a CPU). reuse: the
        server's prefix cache (pipeline.prompt_cache.reuse.ServerReuse, one for both engines): each prefill runs
        only the positions after the cached blocks its prompt starts with, and keeps its own; None: none."""
        self.lm_for, self.max_prompt_tokens, self.static_batch = lm_for, max_prompt_tokens, static_batch
        self.reuse = reuse
        self.batches: dict[int, object] = {}  # id(lm) -> BatchDecoder
        self.graphs: dict[int, object] = {}  # id(lm) -> GraphedBatch (CUDA): its buckets' graphs outlive a batch
        self.started: dict[Hashable, tuple] = {}  # handle -> (lm, row, what finishing it needs)
        self._ids = itertools.count()
        self._prompt_tokens: dict[tuple[int, ChatRequest], int] = {}  # (id(lm), request) -> its prompt's tokens
        self._priced = threading.Lock()  # pages price in their threads, the queue reserves in its own

    def prompt_tokens(self, payload) -> int:
        """The request's prompt in tokens on its model: tokenized once, when the queue prices it."""
        request = self._request(payload)
        lm = self.lm_for(request)
        key = (id(lm), request)
        with self._priced:
            known = self._prompt_tokens.get(key)
        if known is not None:
            return known
        n = len(tokenize_request(lm.tokenizer, request).ids)
        with self._priced:
            if len(self._prompt_tokens) >= PRICED_REQUESTS:
                self._prompt_tokens.pop(next(iter(self._prompt_tokens)))
            self._prompt_tokens[key] = n
        return n

    def price(self, payload) -> tuple[int, int]:
        """(cost, prompt tokens) of a request: what the queue orders and refuses by (run_queue.cost_of)."""
        n = self.prompt_tokens(payload)
        return cost_of(n, self._request(payload).options.max_new_tokens), n

    def reserve(self, payload) -> tuple[int, int]:
        request = self._request(payload)
        return kv_reserve(self.lm_for(request), request, self.prompt_tokens(payload))

    def held_bytes(self, payloads: list, prompt_tokens: list[int]) -> int:
        """The KV bytes these requests (with their prompts' tokens, as reserve counted them) hold together at their
        longest when they run in this engine's batch, per model as its batch holds them
        (graphed_batch_decoding.batch_held_bytes: each its own cache, or the static step's padded bucket). What the
        queue admits by."""
        from pipeline.stages.graphed_batch_decoding import batch_held_bytes

        rows: dict[int, tuple[LanguageModel, list]] = {}
        for payload, prompt in zip(payloads, prompt_tokens, strict=True):
            request = self._request(payload)
            lm = self.lm_for(request)
            rows.setdefault(id(lm), (lm, []))[1].append((prompt, request.options.max_new_tokens))
        return sum(batch_held_bytes(lm, needs, self.graphs.get(key), self.static_batch)
                   for key, (lm, needs) in rows.items())

    def _batch(self, lm: LanguageModel):
        from pipeline.stages.graphed_batch_decoding import open_batch

        if id(lm) not in self.batches:  # on CUDA the batch's static step, its graphs kept in self.graphs
            self.batches[id(lm)] = open_batch(lm, self.graphs, self.static_batch)
        return self.batches[id(lm)]

    def _add(self, lm: LanguageModel, row, extra) -> Hashable:
        handle = next(self._ids)
        self.started[handle] = (lm, row, extra)
        return handle

    def served_by(self, handle: Hashable) -> dict:
        """The paths a started request runs on, named as pipeline.costs.named_time names them, the device and the
        model:
        its prefill's, and its decode steps' (batched: in the batch's one pass; plain: a decoder of its own)."""
        lm, row, _ = self.started[handle]
        return {"prefill_path": self.prefill_path, "decode_path": BATCHED if row.decoder is None else PLAIN,
                "device": device_name(lm.device), "model": lm.name}

    def step(self) -> list[tuple[Hashable, object]]:
        ended = set()
        try:
            for key, batch in list(self.batches.items()):
                ended.update(id(row) for row in batch.step())
                if not len(batch):
                    del self.batches[key]
        except BaseException:  # the queue hands the error to every request in the batch: none of them goes on
            self.batches.clear()
            self.started.clear()
            raise
        out = []
        for handle, (lm, row, extra) in list(self.started.items()):
            if id(row) in ended:
                del self.started[handle]
                out.append((handle, self._finished(lm, row, extra)))
        return out


class TraceEngine(_Engine):
    """payload (key, request, arrived_at) -> a Trace; on_trace(key, trace) is called as each one ends
    (e.g. to store it before its callers are told). Its TTFT and TPOT are the queue's measurement (Unfinished);
    arrived_at (perf_counter) times it only where the queue's record of it was already dropped.

    finisher: an executor (one thread) that assembles each ended request's Trace and calls on_trace, so the
    running batch's next step does not wait for it (~70 ms a request on two CPU cores: stacking 64 steps'
    scores, pickling the run to the disk store); the queue then gets a Future of the Trace. Without one, the
    Trace is made in the queue's thread. Either way once the queue has told it the request's times (Unfinished)."""

    prefill_path = CAPTURED  # every layer's tensors recorded (pipeline.model.prefill)

    def __init__(self, lm_for, max_prompt_tokens=None, on_trace: Callable[[Hashable, object], None] | None = None,
                 finisher: Executor | None = None, static_batch: bool | None = None, reuse: Reuse | None = None):
        super().__init__(lm_for, max_prompt_tokens, static_batch, reuse)
        self.on_trace, self.finisher = on_trace, finisher

    @staticmethod
    def _request(payload) -> ChatRequest:
        return payload[1]

    def start(self, payload) -> Hashable:
        from pipeline.run.trace import prefill_request
        from pipeline.stages.generation import Answer

        key, request, arrived_at = payload
        lm = self.lm_for(request)
        s = prefill_request(request, lm, self.max_prompt_tokens, arrived_at, self.reuse)
        answer = Answer(lm, s.last_logits, request.options, s.rid, s.prefill_started_at, prompt_ids=s.tokenized.ids)
        row = self._batch(lm).join(answer, s.kv_cache)
        s.kv_cache = None  # the batch holds it now
        return self._add(lm, row, (key, s))

    def start_together(self, payloads: list, contexts: list[contextvars.Context] | None = None
                       ) -> list[Hashable | BaseException]:
        """Requests admitted in the same gap between steps: those of one model prefilled in one batched pass
        (pipeline.run.trace.prefill_together), each joining the batch as `start` joins it. One handle per payload,
        or the error that refused it. contexts: each payload's caller's context (the queue's tickets'), whose
        pass counter its passes count for; None: the current one for all."""
        from pipeline.run.trace import prefill_together
        from pipeline.stages.generation import Answer

        callers = [counter_in(c) for c in contexts] if contexts else [current_counter()] * len(payloads)
        out: list[Hashable | BaseException] = [None] * len(payloads)
        by_model: dict[int, list[int]] = {}
        for n, (_, request, _) in enumerate(payloads):
            by_model.setdefault(id(self.lm_for(request)), []).append(n)
        for numbers in by_model.values():
            lm = self.lm_for(payloads[numbers[0]][1])
            started = prefill_together([payloads[n][1] for n in numbers], lm, self.max_prompt_tokens,
                                       [payloads[n][2] for n in numbers], counters=[callers[n] for n in numbers],
                                       reuse=self.reuse)
            for n, s in zip(numbers, started):
                if isinstance(s, BaseException):
                    out[n] = s
                    continue
                answer = Answer(lm, s.last_logits, s.request.options, s.rid, s.prefill_started_at,
                                prompt_ids=s.tokenized.ids)
                row = self._batch(lm).join(answer, s.kv_cache)
                row.counter = callers[n]  # its steps count for its own caller (joined here in the first's context)
                s.kv_cache = None  # the batch holds it now
                out[n] = self._add(lm, row, (payloads[n][0], s))
        return out

    def _finished(self, lm: LanguageModel, row, extra):
        """Unfinished until the queue has measured how the request was served (pipeline.server.schedule): its
        Trace records those times and paths, so the schedule and the stored run show the same figures."""
        return Unfinished(lambda served: self._complete(lm, row, extra, served))

    def _complete(self, lm: LanguageModel, row, extra, served: dict | None):
        if self.finisher is not None:
            return self.finisher.submit(self._trace, lm, row, extra, served)
        return self._trace(lm, row, extra, served)

    def _trace(self, lm: LanguageModel, row, extra, served: dict | None):
        from pipeline.run.trace import _finish

        key, s = extra
        trace = _finish(s, row.result, lm, served=served, decode_path=BATCHED if row.decoder is None else PLAIN)
        if self.on_trace is not None:
            self.on_trace(key, trace)
        return trace


class StreamEngine(_Engine):
    """payload (request, on_event) -> the finished Answer of the plain path (its events sent as made)."""

    @staticmethod
    def _request(payload) -> ChatRequest:
        return payload[0]

    def start(self, payload) -> Hashable:
        from pipeline.faster.fast_path import open_answer

        request, on_event = payload
        lm = self.lm_for(request)
        answer, decoder = open_answer(lm, request, self.max_prompt_tokens, on_event, reuse=self.reuse)
        return self._add(lm, self._batch(lm).join(answer, decoder=decoder), None)

    def _finished(self, lm: LanguageModel, row, extra):
        return row.result

