"""Running one chat request (or several together) end to end into its Trace (pipeline.run.record): the
stages in order, request -> tokens -> batch -> prefill -> decode. Branches and constrained runs start here too.
The functions that run the model import their stages when called, so this module loads without torch.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from pipeline.core.errors import InputError
from pipeline.costs.named_time import BATCHED, CAPTURED, served_times
from pipeline.model.interface import LanguageModel
from pipeline.model.passes import PassCounter, current_counter, passes_for
from pipeline.model.past import NOTHING, Past, Reuse
from pipeline.model.prefill_record import Prefill
from pipeline.run.record import Cleanup, RequestRecord, Timings, Trace, Usage
from pipeline.stages.decode_record import Decode
from pipeline.stages.logit_bias import check_vocabulary
from pipeline.stages.request import ChatRequest
from pipeline.stages.request_lifecycle import (
    RequestState,
    RequestStatus,
    check_fits,
    request_id,
)
from pipeline.stages.tokens import TokenizedRequest, tokenize_request
from pipeline.stages.vendor_bodies import anthropic_style, openai_style


@dataclass
class _Started:
    """A request after its prefill, waiting for its decode."""

    request: ChatRequest
    t0: float
    rid: str
    state: RequestState
    tokenized: TokenizedRequest
    prefill: Prefill
    kv_cache: object  # HF DynamicCache after the prompt; None once the answer is complete
    last_logits: object
    prefill_started_at: float
    reused_positions: int = 0  # prompt positions whose K/V (and captures) came from the server's prefix cache


def prefill_request(request: ChatRequest, lm: LanguageModel, max_prompt_tokens: int | None,
                    t0: float | None = None, reuse: Reuse | None = None) -> _Started:
    """The request checked and its prompt run once, captured: what its decode starts from (run_trace's, a sample
    set's, the server's trace engine's). reuse: the server's prefix cache (pipeline.prompt_cache.reuse): the
    cached blocks the prompt starts with are not run again (their captures kept with them), and its own are kept."""
    from pipeline.model.prefill import run_prefill

    checked = _checked(request, lm, max_prompt_tokens, t0)
    past = _past(checked, lm, reuse)
    return _kept(checked.started(run_prefill(lm, checked.tokenized.ids, past=past), past.n), lm, reuse)


def _past(checked: _Checked, lm: LanguageModel, reuse: Reuse | None) -> Past:
    """The cached blocks a checked request's prompt starts with that its captured prefill can use."""
    from pipeline.model.prefill import captured_past

    return captured_past(lm, checked.tokenized.ids, reuse)


def _kept(s: _Started, lm: LanguageModel, reuse: Reuse | None) -> _Started:
    """The started request, its prompt's blocks kept in the server's prefix cache (with its captures)."""
    if reuse is not None:
        reuse.keep(lm, s.tokenized.ids, s.kv_cache, s.prefill)
    return s


def prefill_together(requests: list[ChatRequest], lm: LanguageModel, max_prompt_tokens: int | None,
                     arrived_at: list[float | None], counters: list[PassCounter | None] | None = None,
                     reuse: Reuse | None = None) -> list[_Started | InputError]:
    """Requests admitted together: each checked on its own (a refused one is its InputError, the others go on),
    the rest prefilled in one batched pass where run_prefill_batch can take them, else one by one.
    counters: each request's caller's pass counter (None: the current caller's for all). reuse: the server's prefix
    cache: a request whose prompt starts with cached blocks runs on its own over them, the others together; each
    one's blocks are kept."""
    from pipeline.model.prefill import can_batch_prefill, run_prefill, run_prefill_batch

    counters = counters or [current_counter()] * len(requests)
    checked: list[tuple[_Checked | InputError, PassCounter | None]] = []
    for request, t0, counter in zip(requests, arrived_at, counters):
        try:
            checked.append((_checked(request, lm, max_prompt_tokens, t0), counter))
        except InputError as e:
            checked.append((e, counter))
    # id(checked) -> the cached blocks its prompt starts with, for those that start with some
    pasts = {id(c): past for c, _ in checked if isinstance(c, _Checked) and (past := _past(c, lm, reuse)).n}
    going = [(c, counter) for c, counter in checked if isinstance(c, _Checked) and id(c) not in pasts]
    prompts = [c.tokenized.ids for c, _ in going]
    if can_batch_prefill(lm, prompts):
        with passes_for([counter for _, counter in going]):  # one pass for all of them
            runs = dict(zip(map(id, (c for c, _ in going)), run_prefill_batch(lm, prompts)))
    else:
        runs = {}
        for ids, (c, counter) in zip(prompts, going):
            with passes_for([counter]):
                runs[id(c)] = run_prefill(lm, ids)
    for c, counter in checked:
        if id(c) in pasts:
            with passes_for([counter]):
                runs[id(c)] = run_prefill(lm, c.tokenized.ids, past=pasts[id(c)])
    return [_kept(c.started(runs[id(c)], pasts.get(id(c), NOTHING).n), lm, reuse) if isinstance(c, _Checked) else c
            for c, _ in checked]


@dataclass
class _Checked:
    """A request tokenized and checked, its prefill about to run."""

    request: ChatRequest
    t0: float
    rid: str
    state: RequestState
    tokenized: TokenizedRequest
    prefill_started_at: float = 0.0

    def started(self, run, reused_positions: int = 0) -> _Started:
        """After its prefill (a PrefillResult), which reused that many positions."""
        self.state.advance(RequestStatus.DECODING)
        return _Started(self.request, self.t0, self.rid, self.state, self.tokenized, run.prefill, run.kv_cache,
                        run.last_logits, self.prefill_started_at, reused_positions)


def _checked(request: ChatRequest, lm: LanguageModel, max_prompt_tokens: int | None, t0: float | None) -> _Checked:
    t0 = time.perf_counter() if t0 is None else t0
    rid = request_id(request, time.time())
    state = RequestState(rid)
    tokenized = tokenize_request(lm.tokenizer, request)
    check_fits(lm.dims, len(tokenized.ids), request.options.max_new_tokens, max_prompt_tokens)
    check_vocabulary(request.options, lm.dims.V)
    state.advance(RequestStatus.PREFILL)
    return _Checked(request, t0, rid, state, tokenized, time.perf_counter())


def _finish(s: _Started, decode: Decode, lm: LanguageModel, batch_index: int = 0, served: dict | None = None,
            decode_path: str = CAPTURED) -> Trace:
    """The request's Trace. served: how the server's queue served it, {ttft_s, tpot_s, total_s, prefill_path,
    decode_path, device} (pipeline.server.schedule: its clock, its paths), recorded as they are; None: a run made
    outside the server, timed on its own clock from its arrival s.t0 (served_times), its steps on decode_path."""
    from pipeline.costs.ceilings import device_name
    from pipeline.stages import batch as batching

    s.state.advance(RequestStatus.COMPLETED)
    ids, request = s.tokenized.ids, s.request
    own = {"prefill_path": CAPTURED, "decode_path": decode_path, "device": device_name(lm.device)}
    if served is None:
        ttft_s, tpot_s = served_times(s.t0, decode.first_token_at, decode.last_token_at, len(decode.generated_ids))
        served = {"ttft_s": ttft_s, "tpot_s": tpot_s, "total_s": decode.last_token_at - s.t0}
    served = {**own, **{k: v for k, v in served.items() if v is not None or k == "tpot_s"}}  # a name not said: ours
    return Trace(
        request=RequestRecord(s.rid, openai_style(request), anthropic_style(request), request.options,
                              s.state.history),
        tokenized=s.tokenized,
        dims=lm.dims,
        batch={"single": batching.describe(batching.batch_tensors([ids], lm.tokenizer.pad_token_id)),
               "entry": {"request_id": s.rid, "batch_index": batch_index, "phase": "prefill", "token_count": len(ids)}},
        prefill=s.prefill,
        decode=decode,
        timings=Timings(ttft_s=served["ttft_s"], tpot_s=served["tpot_s"], prefill_s=s.prefill.seconds,
                        total_s=served["total_s"], prefill_path=served["prefill_path"],
                        decode_path=served["decode_path"], device=served["device"]),
        usage=Usage(len(ids), len(decode.generated_ids)),
        cleanup=Cleanup(decode.kv_bytes_at_end, decode.kv_tokens_at_end),
        reused_positions=s.reused_positions,
    )


def run_trace(request: ChatRequest, lm: LanguageModel | None = None, max_prompt_tokens: int | None = None,
              force: dict[int, int] | None = None) -> Trace:
    """Follow one request through every stage on the real model. force: {step: token id} put at
    those steps instead of the sampler's choice (the steps are marked `forced`)."""
    from pipeline.model.loader import shared_model
    from pipeline.stages.generation import decode_loop

    lm = lm or shared_model()
    s = prefill_request(request, lm, max_prompt_tokens)
    decode = decode_loop(lm, s.kv_cache, s.last_logits, request.options, s.rid, s.prefill_started_at, force,
                         prompt_ids=s.tokenized.ids)
    s.kv_cache = None  # the request's KV cache is freed once the answer is complete
    return _finish(s, decode, lm)


def run_traces(requests: list[ChatRequest], lm: LanguageModel, max_prompt_tokens: int | None = None,
               arrived_at: list[float] | None = None) -> list[Trace | InputError]:
    """Several requests at once, as a serving engine batches them: the prompts prefilled (and captured)
    together (prefill_together: one batched pass where it can take them, as the queue admits a gap's
    arrivals), then all answers decoded together, one forward pass per step.

    Returns one Trace per request, or the InputError that refused it (the others still run).
    arrived_at: perf_counter time each request arrived, so its TTFT includes the wait for the batch.
    """
    from pipeline.stages.batched_decoding import decode_batch

    started = prefill_together(requests, lm, max_prompt_tokens, arrived_at or [None] * len(requests))
    ok = [s for s in started if isinstance(s, _Started)]
    decodes = decode_batch(lm, [s.kv_cache for s in ok], [s.last_logits for s in ok], [s.request.options for s in ok],
                           [s.rid for s in ok], [s.prefill_started_at for s in ok],
                           [s.tokenized.ids for s in ok]) if ok else []
    out, done = [], iter(zip(ok, decodes))
    for item in started:
        if isinstance(item, InputError):
            out.append(item)
        else:
            s, decode = next(done)
            s.kv_cache = None
            out.append(_finish(s, decode, lm, batch_index=ok.index(s), decode_path=BATCHED))
    return out


def branch_trace(trace: Trace, step: int, token_id: int, lm: LanguageModel) -> Trace:
    """The same request, its answer taken another way at `step` (`token_id` forced there); the
    prompt's captures and keys/values are reused, never run again. A full Trace every page can show."""
    from pipeline.stages.branch import branch_decode

    t0 = time.perf_counter()
    rid = f"{trace.request.id}-b{step}-{token_id}"
    decode, _ = branch_decode(lm, trace, step, token_id, rid)
    decode_times = decode.step_seconds[step + 1:]
    states = [{"state": "branched", "from": trace.request.id, "step": step, "token_id": token_id, "t_s": 0.0}]
    return Trace(
        request=RequestRecord(rid, trace.request.openai, trace.request.anthropic, trace.request.options, states),
        tokenized=trace.tokenized, dims=trace.dims, batch=trace.batch, prefill=trace.prefill, decode=decode,
        timings=replace(trace.timings, tpot_s=float(np.mean(decode_times)) if decode_times else None,
                        total_s=time.perf_counter() - t0, decode_path=CAPTURED),
        usage=Usage(len(trace.ids), len(decode.generated_ids)),
        cleanup=Cleanup(decode.kv_bytes_at_end, decode.kv_tokens_at_end),
    )


def run_constrained_trace(request: ChatRequest, lm: LanguageModel, kind: str, spec,
                          max_prompt_tokens: int | None = None) -> Trace:
    """Follow a request whose answer must match a JSON schema, a regex or a choice list."""
    from pipeline.stages.constrained import check_spec, constrained_decode

    check_spec(kind, spec)  # refuse a bad grammar before any forward pass
    s = prefill_request(request, lm, max_prompt_tokens)
    decode, steps = constrained_decode(lm, s.kv_cache, s.last_logits, request, kind, spec, s.rid, s.prefill_started_at,
                                       prompt_ids=s.tokenized.ids)
    s.kv_cache = None
    trace = _finish(s, decode, lm)
    trace.constraint = {"kind": kind, "spec": spec, "steps": steps}
    return trace
