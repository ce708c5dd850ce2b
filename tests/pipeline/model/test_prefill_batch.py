"""Prefills of requests admitted together, in one batched pass (pipeline.model.prefill.run_prefill_batch), on
tiny random-weight models (fast tier): every capture, the KV cache and the next-token scores of each prompt as
run_prefill gives them for that prompt alone; the queue starts requests admitted in one gap that way, and their
answers are the ones each gets alone."""
import threading
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from kit.batching import assert_alone_equal, three_requests
from kit.tolerance import (agreed_steps, any_logit_tolerance, assert_within, attention_tolerance, forward_tolerance,
                           logits_tolerance, scale)

from pipeline.core.errors import InputError
from pipeline.model.kv_tensors import cache_layers
from pipeline.model.prefill import can_batch_prefill, run_prefill, run_prefill_batch
from pipeline.model.prefill_record import FULL_ATTENTION_MAX_TOKENS

FIELDS = ("embeddings", "hidden_states", "attn_out", "mlp_out", "q_rot", "k_rot", "v", "attention", "final_norm")


def _prompts(lm):
    from pipeline.stages.tokens import tokenize_request

    return [tokenize_request(lm.tokenizer, r).ids for r in three_requests()]  # 3 lengths: the longest pads the others


def test_each_prompt_of_a_batched_prefill_is_captured_as_it_is_alone(tiny_lm):
    prompts = _prompts(tiny_lm)
    assert len({len(p) for p in prompts}) == 3
    together = run_prefill_batch(tiny_lm, prompts)
    for ids, batched in zip(prompts, together):
        alone = run_prefill(tiny_lm, ids)
        assert batched.prefill.ids == ids
        # a batch of padded rows and one row: two float32 computations, each value within the rounding of the
        # blocks before it on its own scale (kit.tolerance); the embeddings are one lookup, the same bits
        d, T, p = tiny_lm.dims, len(ids), alone.prefill
        np.testing.assert_array_equal(batched.prefill.embeddings, p.embeddings)
        for field in FIELDS[1:]:
            a, b = getattr(p, field), getattr(batched.prefill, field)
            assert a.shape == b.shape, field  # cut back to the prompt's own positions
            tol = (attention_tolerance(p.q_rot, p.k_rot, d.Dh ** -0.5, T, forward_tolerance(d, 1.0, T))
                   if field == "attention" else forward_tolerance(d, scale(a), T))
            assert_within(b, a, tol, field)
        for (k, v), (k1, v1) in zip(cache_layers(batched.kv_cache), cache_layers(alone.kv_cache)):
            assert k.shape == k1.shape == (1, tiny_lm.dims.Hkv, len(ids), tiny_lm.dims.Dh)
            assert_within(k, k1, forward_tolerance(d, scale(k1), T), "keys")
            assert_within(v, v1, forward_tolerance(d, scale(v1), T), "values")
        assert_within(batched.last_logits, alone.last_logits, logits_tolerance(tiny_lm, ids), "last logits")
        assert batched.prefill.kv_bytes_per_layer == alone.prefill.kv_bytes_per_layer
        assert batched.prefill.seconds == together[0].prefill.seconds  # the one shared pass


def test_only_short_prompts_of_a_full_attention_model_are_batched(tiny_lm):
    prompts = _prompts(tiny_lm)
    assert can_batch_prefill(tiny_lm, prompts)
    assert not can_batch_prefill(tiny_lm, prompts[:1])  # one prompt: run_prefill
    assert not can_batch_prefill(tiny_lm, [prompts[0], [5] * (FULL_ATTENTION_MAX_TOKENS + 1)])  # runs in chunks
    assert not can_batch_prefill(tiny_lm, [prompts[0], []])
    windowed = SimpleNamespace(dims=replace(tiny_lm.dims, sliding_window=8))  # Gemma 3's dimensions say so
    assert not can_batch_prefill(windowed, prompts)  # a sliding layer's cache keeps its window, per request
    with pytest.raises(AssertionError):
        run_prefill_batch(tiny_lm, prompts[:1])


def test_requests_admitted_in_one_gap_are_prefilled_together_and_answer_as_alone(tiny_lm):
    from pipeline.server.run_queue import RunQueue
    from pipeline.server.trace_engine import TraceEngine
    from pipeline.stages.request import ChatRequest, GenerationOptions

    requests = three_requests()
    engine = TraceEngine(lambda r: tiny_lm, max_prompt_tokens=200)
    batched_calls = []
    start_together = engine.start_together
    engine.start_together = (lambda payloads, contexts: batched_calls.append(len(payloads))
                             or start_together(payloads, contexts))
    q = RunQueue(engines={"trace": engine}, prefill_tokens_per_step=10_000)
    release = threading.Event()
    q.submit("gate", lambda: release.wait(10), cost=1)  # the line fills while the worker is held
    refused = ChatRequest.from_question("tomato " * 300, options=GenerationOptions(max_new_tokens=2))  # too long
    tickets = [q.submit(i, lambda: pytest.fail("stepped"), cost=1, batch=("trace", (i, r, None)))
               for i, r in enumerate(requests + [refused])]
    release.set()
    traces = [t.result(60) for t in tickets[:3]]
    with pytest.raises(InputError):
        tickets[3].result(60)  # refused on its own; the others went on
    assert batched_calls == [4]  # all four in one call: one batched pass for the three that fit
    assert_alone_equal(tiny_lm, traces, requests)


def test_run_traces_prefills_its_requests_in_the_one_batched_pass_and_answers_as_alone(tiny_lm, monkeypatch):
    """pipeline.run.trace.run_traces (a batch of traces outside the queue) prefills the way the queue does: one
    batched pass for the prompts that fit (run_prefill, one prompt's pass, is not called), a refused request its
    InputError, and every answer the one it gets alone."""
    from pipeline.model import prefill
    from pipeline.run.trace import run_trace, run_traces
    from pipeline.stages.request import ChatRequest, GenerationOptions

    requests = three_requests()
    alone = [run_trace(r, tiny_lm) for r in requests]
    refused = ChatRequest.from_question("tomato " * 300, options=GenerationOptions(max_new_tokens=2))
    monkeypatch.setattr(prefill, "run_prefill", lambda *a, **k: pytest.fail("prefilled one by one"))
    out = run_traces(requests + [refused], tiny_lm, max_prompt_tokens=200)
    assert isinstance(out[3], InputError)
    assert [t.generated_token_ids for t in out[:3]] == [t.generated_token_ids for t in alone]
    assert len({t.prefill.seconds for t in out[:3]}) == 1  # the one shared pass


@pytest.mark.model
def test_on_the_real_model_answers_prefilled_together_are_the_answers_alone(lm):
    """SmolLM2: three room questions admitted in one gap, greedy; each answer is the one it gets alone, with the
    scores of every step within float rounding. The kernels may depend on the batch's shape (a GPU's do; a CPU's by
    its capability), so the keys agree within the float32 rounding of the blocks before them (kit.tolerance; on an
    H200 they differed by 2.4e-5 at most), and the answers part only where a step's two best scores tie within
    rounding."""
    from pipeline.run.trace import run_trace
    from pipeline.server.trace_engine import TraceEngine
    from pipeline.stages.request import ChatRequest, GenerationOptions

    options = GenerationOptions(max_new_tokens=12)
    requests = [ChatRequest.from_question(q, options=options)
                for q in ("Why do leaves change colour?", "What is a noun?", "토마토는 과일이야?")]
    engine = TraceEngine(lambda r: lm)
    handles = {h: i for i, h in enumerate(engine.start_together([(i, r, None) for i, r in enumerate(requests)]))}
    assert len(handles) == 3  # none refused
    done = {}
    while len(done) < len(requests):
        done.update((handles[h], made.complete(None)) for h, made in engine.step())  # as the queue does
    for i, request in enumerate(requests):
        alone, together = run_trace(request, lm), done[i]
        T = len(alone.ids)
        keys = alone.prefill.k_rot
        assert_within(together.prefill.k_rot, keys, forward_tolerance(lm.dims, scale(keys), T), "keys")
        tol = any_logit_tolerance(lm, T + len(alone.generated_token_ids))
        n = agreed_steps(together.generated_token_ids, alone.generated_token_ids, alone.step_logits, tol,
                         str(request.messages))
        assert_within(together.step_logits[:n], alone.step_logits[:n], tol, "step scores")
