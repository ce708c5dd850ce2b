"""Serving a room: the queue, batched decoding, stored runs (memory and disk), honest timings, links."""
import os
import pickle
import sys
import threading
import time

import numpy as np
import pytest
from kit.tolerance import (abs_dot, agreed_steps, any_logit_tolerance, assert_within, float32_tolerance,
                           logits_tolerance)

from pipeline.core.errors import InputError
from pipeline.core.timing import compare_runs
from pipeline.model.passes import PassCounter, counting_passes
from pipeline.server.run_queue import LONG_PROMPT_TOKENS, LONG_QUEUE, RunQueue, cost_of
from pipeline.server.store.disk import DiskStore
from pipeline.server.store.memory import RunStore, deep_size


class Sized:
    def __init__(self, nbytes):
        self.nbytes = nbytes


# ---- the queue ------------------------------------------------------------------------------------
def _gate(started: threading.Event | None = None):
    """A job that runs until released: keeps the worker busy while a test fills the line (and sets
    `started` once the worker is in it)."""
    release = threading.Event()

    def block():
        if started is not None:
            started.set()
        return release.wait(10) and "first"

    return release, block


def test_queue_runs_in_arrival_order_and_reports_places():
    q = RunQueue()
    started = threading.Event()
    release, block = _gate(started)
    first = q.submit("a", block, cost=10)
    order = []
    tickets = [q.submit(k, lambda k=k: order.append(k) or k, cost=10) for k in "bcd"]
    assert started.wait(10), "the worker did not start the first job within 10 s"
    assert first.position() == 0  # running
    assert [t.position() for t in tickets] == [1, 2, 3]
    assert tickets[2].estimate_s() > tickets[0].estimate_s() > 0
    release.set()
    assert [t.result() for t in tickets] == ["b", "c", "d"] and order == ["b", "c", "d"]
    assert first.result() == "first"


def test_identical_requests_share_one_ticket_and_errors_reach_the_caller():
    q = RunQueue()
    release, block = _gate()
    q.submit("busy", block, cost=1)
    calls = []
    a = q.submit("same", lambda: calls.append(1) or 42, cost=1)
    b = q.submit("same", lambda: calls.append(1) or 43, cost=1)
    assert a is b
    bad = q.submit("bad", lambda: 1 / 0, cost=1)
    release.set()
    assert a.result() == 42 and calls == [1]
    with pytest.raises(ZeroDivisionError):
        bad.result()


def test_a_ticket_is_a_future_that_no_caller_can_cancel_for_the_others():
    from concurrent.futures import Future, as_completed

    q = RunQueue()
    release, block = _gate()
    busy = q.submit("busy", block, cost=1)
    done = []
    shared = q.submit("shared", lambda: "answer", cost=1)
    shared.add_done_callback(done.append)
    bad = q.submit("bad", lambda: 1 / 0, cost=1)
    assert isinstance(shared, Future) and not shared.done() and not shared.wait(0)
    assert not shared.cancel() and not shared.cancelled()  # a second session asked for the same key
    release.set()
    assert {f.key for f in as_completed([busy, shared, bad], timeout=10)} == {"busy", "shared", "bad"}
    assert shared.result() == "answer" and done == [shared] and shared.exception() is None
    assert isinstance(bad.exception(), ZeroDivisionError) and bad.position() == 0


def test_long_prompts_are_refused_while_the_queue_is_long():
    q = RunQueue()
    release, block = _gate()
    q.submit("busy", block, cost=1)
    for i in range(LONG_QUEUE - 1):
        q.submit(i, lambda: None, cost=1)
    with pytest.raises(InputError) as e:
        q.submit("long", lambda: None, cost=5000, prompt_tokens=LONG_PROMPT_TOKENS + 1)
    assert e.value.field == "messages" and "queue" in e.value.message
    q.submit("short", lambda: None, cost=50, prompt_tokens=40)  # short prompts still get in line
    release.set()


def test_live_streaming_of_a_long_prompt_is_refused_while_the_queue_is_long(tokenizer, monkeypatch):
    """The live stream goes through the same refusal as every other model job (it once sent no prompt length)."""
    from types import SimpleNamespace

    from pipeline.server.trace_engine import StreamEngine
    from pipeline.stages.request import ChatRequest
    from views import live_stream

    model = SimpleNamespace(tokenizer=tokenizer)
    q = RunQueue(engines={"stream": StreamEngine(lambda request: model, 4096)})  # it prices the stream's request
    release, block = _gate()
    q.submit("busy", block, cost=1)
    for i in range(LONG_QUEUE - 1):
        q.submit(i, lambda: None, cost=1)
    monkeypatch.setattr(live_stream, "run_queue", lambda: q)
    monkeypatch.setattr(live_stream, "get_model", lambda: model)
    long_question = "Why are tomatoes red? " * (LONG_PROMPT_TOKENS // 5)
    try:
        with pytest.raises(InputError) as e:
            live_stream.stream_live(ChatRequest.from_question(long_question), None)
        assert "queue" in e.value.message
        assert f"{live_stream.prompt_length(ChatRequest.from_question(long_question)):,}" in e.value.message
    finally:
        release.set()


def test_background_preparation_yields_to_people_and_is_brought_forward():
    q = RunQueue()
    release, block = _gate()
    q.submit("busy", block, cost=1)
    order = []
    bg = q.submit("prep", lambda: order.append("prep"), cost=1, background=True)
    person = q.submit("person", lambda: order.append("person"), cost=1)
    bg2 = q.submit("prep2", lambda: order.append("prep2"), cost=1, background=True)
    assert person.position() < bg.position()
    assert q.submit("prep2", lambda: None, cost=1) is bg2  # someone asks for it: it joins the people's line
    release.set()
    bg.result(), bg2.result(), person.result()
    assert order == ["person", "prep2", "prep"]


def test_cost_weights_decode_steps():
    assert cost_of(34, 64) == 34 + 64 * 15


# ---- stored runs ----------------------------------------------------------------------------------
def test_run_store_is_bounded_in_bytes_and_drops_the_least_recently_used():
    store = RunStore(max_bytes=100)
    for k in "abc":
        store.get_or_run(k, lambda: Sized(40))
    assert len(store) == 2 and store.peek("a") is None  # 120 > 100: 'a' went first
    store.peek("b")  # b used again
    store.get_or_run("d", lambda: Sized(40))
    assert store.peek("c") is None and store.peek("b") is not None and store.bytes_held == 80


def test_deep_size_adds_up_what_a_result_holds():
    rows = [{"name": "turn 1", "ms": 1.5}, {"name": "turn 2", "ms": 2.5}]
    by_hand = sys.getsizeof(rows) + sum(sys.getsizeof(r) + sum(sys.getsizeof(x) for kv in r.items() for x in kv)
                                        for r in rows) - sys.getsizeof("name") - sys.getsizeof("ms")  # keys shared
    assert deep_size(rows) == by_hand
    arr = np.zeros((100, 10), np.float32)
    assert deep_size(arr) == 4000 and deep_size({"a": arr, "b": arr}) == sys.getsizeof({"a": 0, "b": 0}) + \
        sys.getsizeof("a") + sys.getsizeof("b") + 4000  # one array under two keys counts once
    assert deep_size(Sized(123)) == 123  # a Trace counts its own arrays


def test_results_store_is_bounded_in_bytes_not_in_count():
    """result_store() once kept 256 results whatever their size (size_of=lambda r: 1): 256 branch traces
    of hundreds of MB each. Now small results are all kept and big ones evict each other."""
    from pipeline.server.wiring import RESULT_MAX_BYTES
    from views import server_state as common

    common.result_store.clear()
    try:
        store = common.result_store()
        for i in range(300):
            store.put(("small", i), [i, float(i)])
        assert len(store) == 300 and store.bytes_held == 300 * deep_size([0, 0.0])
        half = RESULT_MAX_BYTES // 2 + 1
        store.put("big 1", Sized(half))
        store.put("big 2", Sized(half))  # over the bound: the oldest go first, small ones and then big 1
        assert store.peek("big 1") is None and store.peek("big 2") is not None
        assert store.bytes_held <= RESULT_MAX_BYTES
    finally:
        common.result_store.clear()


def test_run_store_computes_once_for_concurrent_callers():
    store, calls, callers = RunStore(), [], 6
    arrived = threading.Condition()
    entered = []

    def slow():  # the computation stays running until every caller has asked for the same key
        calls.append(1)
        with arrived:
            assert arrived.wait_for(lambda: len(entered) == callers, timeout=10), f"{len(entered)} callers came"
        return Sized(1)

    def caller():
        with arrived:
            entered.append(1)
            arrived.notify_all()
        out.append(store.get_or_run("k", slow))

    out = []
    threads = [threading.Thread(target=caller) for _ in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(calls) == 1 and len(out) == callers and len({id(o) for o in out}) == 1


def test_disk_store_survives_a_new_process_view_and_drops_damaged_files(tmp_path):
    disk = DiskStore(tmp_path, max_bytes=10**6)
    disk.put(("q", 1), {"answer": [1, 2, 3]})
    assert DiskStore(tmp_path).get(("q", 1)) == {"answer": [1, 2, 3]}  # another store on the same folder
    path = disk.path(("q", 1))
    path.write_bytes(b"not a pickle")
    assert disk.get(("q", 1)) is None and not path.exists()
    assert not list(tmp_path.glob("*.tmp"))  # nothing half-written left behind


def test_disk_store_evicts_least_recently_used_within_its_budget(tmp_path):
    disk = DiskStore(tmp_path, max_bytes=3 * len(pickle.dumps(b"x" * 1000)) + 100)
    for i in range(3):
        disk.put(i, b"x" * 1000)
        os.utime(disk.path(i), (time.time() - 100 + i, time.time() - 100 + i))  # written one after another
    disk.get(0)  # 0 is used again: now the most recent
    disk.put(3, b"x" * 1000)
    assert disk.get(1) is None and disk.get(0) is not None and disk.get(3) is not None


def test_run_store_reads_through_to_disk(tmp_path):
    first = RunStore(disk=DiskStore(tmp_path))
    first.get_or_run("k", lambda: Sized(5))
    again = RunStore(disk=DiskStore(tmp_path))  # a restart: memory empty, disk kept
    assert again.peek("k") is None and again.peek("k", disk=True).nbytes == 5
    assert again.get_or_run("k", lambda: pytest.fail("must not run again")).nbytes == 5


# ---- timings that cannot be inverted by load ------------------------------------------------------
def test_overlapping_ranges_claim_no_ratio():
    c = compare_runs([0.10, 0.30, 0.12], [0.20, 0.25, 0.22])
    assert not c.separated and "no clear difference" in c.verdict("hit", "cold")


def test_separated_ranges_give_the_median_ratio():
    c = compare_runs([0.10, 0.12, 0.11], [0.50, 0.55, 0.52])  # medians 0.11 and 0.52 -> 4.7x
    assert c.separated and c.a_median == 0.11 and c.b_median == 0.52
    assert "hit is 4.7× faster" in c.verdict("hit", "cold")


def _timer(values: list[float]):
    """A run that returns the next of `values` as the seconds it measured."""
    it = iter(values)
    return lambda: next(it)


def test_a_result_that_contradicts_the_work_is_measured_again():
    from pipeline.core.timing import interleave_less_work

    # the hit (less work) first measured clearly slower, then clearly faster on the second look
    c = interleave_less_work(_timer([0.9, 0.9, 0.9] + [0.1] * 6), _timer([0.2, 0.2, 0.2] + [0.5] * 6), 3)
    assert not c.noise and c.repeats == 6 and "hit is 5.0× faster" in c.verdict("hit", "cold")


def test_a_result_that_keeps_contradicting_the_work_is_noise():
    from pipeline.core.timing import interleave_less_work

    c = interleave_less_work(_timer([0.9] * 9), _timer([0.2] * 9), 3)
    assert c.noise and "noise" in c.verdict("hit", "cold") and "faster" not in c.verdict("hit", "cold")


# ---- links --------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, ok", [("0.7", True), ("abc", False), ("nan", False), ("3", False), ("-1", False)])
def test_link_numbers_are_checked(raw, ok):
    from views.url_state import REQUEST

    parse = REQUEST["temperature"].parse
    if ok:
        assert parse(raw) == 0.7
    else:
        with pytest.raises((ValueError, InputError)):
            parse(raw)


def test_a_links_top_k_goes_up_to_the_models_vocabulary(monkeypatch):
    """top-k's top is the model's vocabulary size, not SmolLM2's 49,152 written down: Gemma 3 has 262,144."""
    from views import link_params, url_state

    monkeypatch.setattr(link_params, "_vocab_size", lambda: 262_144)
    for param in (url_state.REQUEST["top_k"], url_state.page_params("next-token", 30, 9)["nt.top_k"]):
        assert param.parse("262144") == 262_144 and param.parse("0") == 0
        with pytest.raises(ValueError):
            param.parse("262145")
    monkeypatch.setattr(link_params, "_vocab_size", lambda: 100)
    with pytest.raises(ValueError):
        url_state.REQUEST["top_k"].parse("101")


def test_link_text_refuses_what_a_request_would():
    from views.url_state import REQUEST

    assert REQUEST["q"].parse("<b>hi</b>") == "<b>hi</b>"  # kept as text; the pages escape it
    with pytest.raises(InputError):
        REQUEST["q"].parse("x" * 100_000)


# ---- batched decoding on the real model ------------------------------------------------------------
@pytest.mark.model
def test_batched_runs_equal_single_runs(lm):
    from pipeline.run.trace import run_trace, run_traces
    from pipeline.stages.request import ChatRequest, GenerationOptions

    requests = [ChatRequest.from_question("Are tomatoes fruit?", options=GenerationOptions(max_new_tokens=12)),
                ChatRequest.from_question("토마토는 과일이야?", options=GenerationOptions(
                    max_new_tokens=12, temperature=0.8, top_p=0.9, seed=3)),
                ChatRequest.from_question("Write a haiku about rain.", options=GenerationOptions(
                    max_new_tokens=20, stop=("rain",)))]
    batch = run_traces(requests, lm)
    for request, b in zip(requests, batch):
        a = run_trace(request, lm)
        # padded rows and one row: float32 rounding apart (kit.tolerance); the same answer unless a step's two best
        # scores tie within it
        tol = any_logit_tolerance(lm, len(a.ids) + len(a.generated_token_ids))
        n = agreed_steps(b.generated_token_ids, a.generated_token_ids, a.step_logits, tol, str(request.messages))
        assert_within(b.step_logits[:n], a.step_logits[:n], tol, "step scores")
        if n == len(a.generated_token_ids) == len(b.generated_token_ids):
            assert b.finish_reason == a.finish_reason and b.text == a.text
            assert b.steps[-1].kv_cache_bytes == a.steps[-1].kv_cache_bytes  # its own rows, not the padding
        assert b.steps[0].batch_size == 3
        assert [s.kv_cache_tokens for s in b.steps[:n]] == [s.kv_cache_tokens for s in a.steps[:n]]


@pytest.mark.model
def test_a_refused_request_does_not_stop_its_batch(lm):
    from pipeline.run.trace import run_traces
    from pipeline.stages.request import ChatRequest

    long = ChatRequest.from_question("garden " * 3000)
    ok = ChatRequest.from_question("Hi")
    out = run_traces([long, ok], lm, max_prompt_tokens=1000)
    assert isinstance(out[0], InputError) and out[0].field == "messages"
    assert out[1].finish_reason in ("eos", "length")


@pytest.mark.model
def test_html_report_is_self_contained(default_trace):
    from ui.report import trace_report

    html = trace_report(default_trace)
    assert html.count("<h2>") == 12 and "Plotly.newPlot" in html
    assert "<script src=" not in html and "<link " not in html  # nothing fetched when opened
    assert default_trace.text[:20].replace("'", "&#x27;") in html


@pytest.mark.model
def test_plain_serving_path_chooses_the_captured_runs_tokens(lm):
    from pipeline.faster.fast_path import generate, stream
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest, GenerationOptions

    for question, options in (("Are tomatoes fruit?", GenerationOptions(max_new_tokens=16)),
                              ("토마토는 과일이야?", GenerationOptions(max_new_tokens=12, temperature=0.8, seed=2)),
                              ("Count to ten.", GenerationOptions(max_new_tokens=30, stop=("5",)))):
        request = ChatRequest.from_question(question, options=options)
        captured, plain = run_trace(request, lm), generate(lm, request)
        assert plain.generated == captured.generated_token_ids and plain.text == captured.text
        assert plain.finish_reason == captured.finish_reason
        events = list(stream(lm, request))
        assert "".join(e.delta for e in events) == captured.text  # the live deltas rebuild the answer
        assert all(a.t_s <= b.t_s for a, b in zip(events[:-2], events[1:-1]))  # in time order
        *deltas, done = events  # one event type on both paths: the plain stream sends the captured run's deltas
        assert [(e.step, e.delta) for e in deltas] == [(e.step, e.delta) for e in captured.decode.events]
        assert done.kind == "completed" and done.finish_reason == captured.finish_reason


def test_generation_page_streams_live(tiny_app):
    from kit.apptest import page_app

    at = page_app("generation", req_max_new_tokens=8)
    at.run()
    at.button(key="gen_live").click().run()
    assert not at.exception
    assert any(c.value.startswith("TTFT (plain path)") and "TPOT (plain path)" in c.value for c in at.caption)
    assert any("plain serving" in m.value and "stored run recorded TPOT (" in m.value for m in at.markdown)


@pytest.mark.parametrize("weights", ["fp32", "bf16"])
def test_warm_up_prepares_what_visitors_ask_for_under_their_keys(tmp_path, monkeypatch, tiny_app, weights):
    """The server's warm-up must store the default request where a visitor's default request looks for
    it (a late-bound key once filed it under the scenario's key, so the first visitor ran it again), in the
    weight format a new session starts on (./run.sh app --weights bf16 sets TPE_WEIGHTS)."""
    from pipeline.model.passes import PassCounter, counting_passes
    from pipeline.model.weights_cache import CACHE_ENV, cache_root
    from pipeline.stages.request import ChatRequest
    from views.server_state import result_store, run_queue, run_store
    from views.session_request import DEFAULT_QUESTION, request_key
    from views.waiting import model_result_key
    from views.warm_up import warm_up

    for entry in cache_root().iterdir():  # the weights, but empty stores of runs and of scenarios' rows
        if entry.name not in ("runs", "results"):
            (tmp_path / entry.name).symlink_to(entry)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    monkeypatch.setenv("TPE_WEIGHTS", weights)
    monkeypatch.setenv("TPE_WARM_UP", "all")  # a server's default (the tiny-model page tests prepare the request only)
    for resource in (run_store, result_store, run_queue, warm_up):  # all once-per-server resources
        resource.clear()
    from views.server_state import default_model_key, get_model

    network = get_model(default_model_key(), weights)
    before, first_visitor = network.calls, PassCounter()
    with counting_passes(first_visitor):  # app.py starts the warm-up inside the first session's count
        jobs = warm_up()
    for ticket in jobs.values():
        ticket.result()
    assert network.calls > before  # the warm-up ran the model...
    assert first_visitor.n == 0  # ...as the server's work: not "forward passes run for your session"
    visitor = ChatRequest.from_question(DEFAULT_QUESTION, weights=weights)
    trace = run_store().get_or_run(request_key(visitor), lambda: pytest.fail("the default request ran again"))
    assert trace.request.messages == visitor.messages and trace.dims.weights == weights
    from pipeline.prompt_cache.scenarios import scenarios
    from views.scenarios import scenario_key

    for name in scenarios():  # Start says every scenario is prepared: no trap or fix button may run the model
        records = result_store().get_or_run(model_result_key(scenario_key(name)),  # the default model's
                                            lambda: pytest.fail(f"{name} ran on first click"))
        assert isinstance(records, list) and records and isinstance(records[0], dict)


def test_warm_up_of_the_request_only_leaves_the_scenarios_to_their_page(tmp_path, monkeypatch, tiny_app):
    """TPE_WARM_UP=request: the warm-up queues the default request and no scenario, and Start says so instead of
    "all N scenarios are prepared"; the Prompt caching page still plays a scenario when it is opened."""
    from streamlit.testing.v1 import AppTest

    from pipeline.model.weights_cache import CACHE_ENV, cache_root
    from views.server_state import result_store, run_queue, run_store
    from views.warm_up import warm_up

    for entry in cache_root().iterdir():  # the weights, but empty stores of runs and of scenarios' rows
        if entry.name not in ("runs", "results"):
            (tmp_path / entry.name).symlink_to(entry)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    monkeypatch.setenv("TPE_WARM_UP", "request")
    for resource in (run_store, result_store, run_queue, warm_up):
        resource.clear()
    jobs = warm_up()
    assert list(jobs) == ["the default request"]
    for ticket in jobs.values():
        ticket.result()
    at = AppTest.from_file(os.path.join(os.path.dirname(__file__), "..", "views", "pages", "start.py")).run()
    assert not at.exception, at.exception
    assert any("the default request is prepared" in s.value and "TPE_WARM_UP=request" in s.value
               for s in at.success), [s.value for s in at.success]
    for resource in (run_store, result_store, run_queue, warm_up):  # the other tests' server, not this one's
        resource.clear()


def test_waiting_time_reads_in_steps_that_do_not_flicker():
    from views.waiting import waiting_time

    assert [waiting_time(s) for s in (0, 4, 9.9, 37, 44, 95, 130)] == [
        "a few seconds", "a few seconds", "a few seconds", "40 s", "40 s", "1.5 min", "2 min"]


# ---- the plain serving path's decoder (pipeline.model.decoders.plain) -------------------------------

PLAIN_STEPS = 48
LONG_NOTES = " ".join(f"Box {i} is {('red', 'green', 'blue', 'yellow')[i % 4]} and holds {i * 7 % 13} apples."
                      for i in range(60))  # ~730 tokens: the prompt runs in more than one prefill chunk


def _hf_greedy(lm, ids: list[int], n: int) -> list[int]:
    """Plain Hugging Face generate, greedy: the reference the plain path must match token for token."""
    import torch

    x = torch.tensor([ids], device=lm.device)
    with lm.lock, torch.inference_mode():
        out = lm.model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n)
    return out[0, len(ids):].tolist()


def _request_ids(lm, question: str, n: int):
    from pipeline.stages.request import ChatRequest, GenerationOptions
    from pipeline.stages.tokens import tokenize_request

    request = ChatRequest.from_question(question, options=GenerationOptions(max_new_tokens=n))
    return request, tokenize_request(lm.tokenizer, request).ids


def test_plain_decoder_row_blocks_give_linear_s_exact_outputs_at_smollm2_shapes():
    """The decoder runs each projection as a bmm over row blocks of the weight (both cores read it);
    at SmolLM2's shapes one block is F.linear's result to the bit, and more blocks the same dot products
    within float32 rounding (kit.tolerance: d terms each; another kernel may add them in another order)."""
    import torch
    import torch.nn.functional as F

    from pipeline.model.decoders.plain import project, row_blocks

    g = torch.Generator().manual_seed(0)
    for n, d in ((576, 576), (192, 576), (1536, 576), (576, 1536), (49152, 576)):  # q/o, k/v, gate/up, down, head
        w, x = torch.randn(n, d, generator=g), torch.randn(1, d, generator=g)
        reference = F.linear(x, w)
        assert torch.equal(project(x, row_blocks(w, 1)), reference)  # one block: the Linear itself
        tol = float32_tolerance(d, 1.0) * abs_dot(x.numpy(), w.numpy())  # (1, n)
        for k in (2, 3):  # the same dot products, maybe another kernel's order
            assert_within(project(x, row_blocks(w, k)), reference, tol, f"{(n, d, k)}")
    assert row_blocks(torch.zeros(7, 4), 2).shape == (1, 4, 7)  # rows that do not divide: one block


def test_plain_decoder_follows_hf_on_a_tiny_llama(tokenizer, tiny_lm):
    """Random weights, no model files: the decoder's logits follow HF's full forward step by step, a
    model it does not cover (q/k/v biases) is decoded by HF's forward behind the same interface, and
    a step past the positions it was sized for is refused."""
    import torch
    from kit.tiny_models import make_tiny_lm

    from pipeline.model.decoders.factory import open_decoder
    from pipeline.model.decoders.plain import HFDecoder, PlainDecoder

    ids = tokenizer("Are tomatoes fruit? Yes, botanically they are.")["input_ids"]
    steps = 12
    for lm, kind in ((tiny_lm, PlainDecoder), (make_tiny_lm(tokenizer, attention_bias=True), HFDecoder)):
        decoder = open_decoder(lm, len(ids) + steps)
        assert type(decoder) is kind
        seq, logits = list(ids), decoder.prefill(ids)
        for _ in range(steps):
            with torch.inference_mode():
                x = torch.tensor([seq], device=lm.device)
                full = lm.model(input_ids=x).logits[0, -1]  # (V,) the whole sequence again
            assert_within(logits, full, logits_tolerance(lm, seq), f"{kind.__name__} at {len(seq)}")
            seq.append(int(logits.argmax()))
            logits = decoder.step(seq[-1])
    plain = PlainDecoder(tiny_lm, len(ids) + 1)
    plain.prefill(ids)
    plain.step(5)
    with pytest.raises(ValueError):
        plain.step(5)


@pytest.mark.model
def test_plain_decoder_logits_match_hf_full_forward(lm):
    """At several decode steps (a short prompt, and one prefilled in several chunks) the decoder's
    logits equal HF's forward over the whole sequence, and each step counts one forward pass."""
    import torch

    from pipeline.model.decoders.plain import PlainDecoder, supports

    assert supports(lm.model)  # SmolLM2 runs on PlainDecoder, not on the HF fallback
    for question, checked in (("Are tomatoes fruit?", (1, 2, 9, 30)),
                              (LONG_NOTES + " Describe every box above, one per line.", (1, 5, 20))):
        _, ids = _request_ids(lm, question, 64)
        n = max(checked) + 1
        decoder = PlainDecoder(lm, len(ids) + n)
        seq, logits = list(ids), decoder.prefill(ids)
        for step in range(n):
            if step in checked:
                with lm.lock, torch.inference_mode():
                    full = lm.model(input_ids=torch.tensor([seq], device=lm.device)).logits[0, -1]  # (V,)
                assert_within(logits, full, logits_tolerance(lm, seq), f"step {step}")
            seq.append(int(logits.argmax()))
            with counting_passes(PassCounter()) as mine:  # this thread's passes (a warm-up may share the model)
                logits = decoder.step(seq[-1])
            assert mine.n == 1


@pytest.mark.model
@pytest.mark.parametrize("question, long_prompt", [("Are tomatoes fruit?", False), ("토마토는 과일이야?", False),
                                                    (LONG_NOTES + " Describe every box above, one per line.", True)],
                         ids=["default", "korean", "longer-than-a-prefill-chunk"])
def test_plain_path_greedy_tokens_equal_hf_generate(lm, question, long_prompt):
    from pipeline.faster.fast_path import generate
    from pipeline.model.prefill import PREFILL_CHUNK

    request, ids = _request_ids(lm, question, PLAIN_STEPS)
    assert (len(ids) > PREFILL_CHUNK) == long_prompt
    plain = generate(lm, request)
    assert plain.generated == _hf_greedy(lm, ids, PLAIN_STEPS)
    assert len(plain.generated) == PLAIN_STEPS and plain.finish_reason == "length"  # every step was compared


@pytest.mark.model
def test_plain_path_stops_at_the_end_token(lm):
    from pipeline.faster.fast_path import stream
    from pipeline.stages.generation import end_token_ids

    request, ids = _request_ids(lm, "Reply with one word: what colour is the sky?", 64)
    events = list(stream(lm, request))
    done, eos = events[-1], end_token_ids(lm)
    assert done.finish_reason == "eos" and done.token_ids[-1] in eos and len(done.token_ids) < 64
    assert not eos & set(done.token_ids[:-1])
    assert list(done.token_ids) == _hf_greedy(lm, ids, 64)  # HF stops at the same end token
    assert "".join(e.delta for e in events) == done.text
    assert lm.tokenizer.decode(done.token_ids[-1]) not in done.text


@pytest.mark.model
def test_comparing_the_two_paths_measures_both_interleaved_on_the_same_tokens(lm):
    from pipeline.core.errors import InputError
    from pipeline.run.compare_paths import compare_with_captured
    from pipeline.stages.request import ChatRequest, GenerationOptions

    result = compare_with_captured(lm, ChatRequest.from_question("Are tomatoes fruit?"), steps=8, repeats=2)
    c = result["comparison"]
    assert result["steps"] == 8 and result["same_tokens"] and c.repeats == 2
    assert c.a_range[0] <= c.a_median <= c.a_range[1] and c.b_range[0] <= c.b_median <= c.b_range[1]
    assert 0.005 < c.a_median < 5 and 0.005 < c.b_median < 5  # real seconds per token, not a placeholder
    with pytest.raises(InputError, match="fewer than 3 tokens"):
        compare_with_captured(lm, ChatRequest.from_question("Hi", options=GenerationOptions(max_new_tokens=2)))


def test_generation_page_compares_the_two_paths_now(tiny_app):
    from kit.apptest import page_app

    at = page_app("generation")
    at.run()
    at.button(key="gen_compare").click().run()
    assert not at.exception
    labels = [m.label for m in at.metric]
    assert "plain serving path, ms/token" in labels and "captured run, ms/token" in labels
    assert any("interleaved" in m.value and "Both chose the same tokens" in m.value for m in at.markdown)


def test_a_download_after_the_store_dropped_the_run_says_so(monkeypatch):
    """Download buttons hold the run's key; a run dropped since (memory full, disk store off) gives a note,
    not an AttributeError on None."""
    from views import runs

    store = RunStore(max_bytes=10, size_of=len)
    monkeypatch.setattr(runs, "run_store", lambda: store)
    store.put(("k",), "the run")
    assert runs.stored_download(("k",), str.upper) == "THE RUN"
    assert runs.stored_download(("gone",), str.upper) == runs.RUN_GONE


def test_timing_a_scenario_again_runs_at_most_once_a_minute(monkeypatch):
    """'Time these requests again now' replaces everyone's timings: clicks in the same minute share one replay
    (the queue alone merged only clicks that arrived while it ran)."""
    from views import scenarios, waiting

    plays = []
    store = RunStore(max_bytes=2**20, size_of=deep_size)
    monkeypatch.setattr(scenarios, "play_scenario_now",
                        lambda lm, key, block_size: plays.append(key) or [{"n": len(plays)}])
    monkeypatch.setattr(scenarios, "get_model", lambda: None)
    for module in (scenarios, waiting):  # the scenario's own store and the queue's check before it
        monkeypatch.setattr(module, "result_store", lambda: store)
    monkeypatch.setattr(scenarios.time, "time", lambda: 600.0)
    first = scenarios.scenario_rows_timed_again("conversation")
    assert scenarios.scenario_rows_timed_again("conversation") == first and plays == ["conversation"]
    monkeypatch.setattr(scenarios.time, "time", lambda: 661.0)  # the next minute: measured again
    assert scenarios.scenario_rows_timed_again("conversation") == [{"n": 2}]
    assert scenarios.scenario_rows("conversation") == [{"n": 2}]


def test_start_page_reads_the_warm_up_tickets_as_futures(monkeypatch):
    """Start lists what is still being prepared and what failed, from the tickets' Future API
    (done(), exception()): a ticket once had `done`/`error` properties of its own."""
    from concurrent.futures import Future

    from streamlit.testing.v1 import AppTest

    from views import server_state, warm_up

    pending, failed = Future(), Future()
    failed.set_exception(RuntimeError("disk full"))
    monkeypatch.setattr(warm_up, "warm_up", lambda: {"the default request": pending, "prompt caching: A trap": failed})
    monkeypatch.setattr(server_state, "run_queue", lambda: [pending])
    at = AppTest.from_file(os.path.join(os.path.dirname(__file__), "..", "views", "pages", "start.py")).run()
    assert not at.exception
    assert any("Preparing prompt caching: A trap failed (RuntimeError: disk full)" in w.value for w in at.warning)
    assert any("the default request." in i.value and "(1 in the model's queue now)" in i.value for i in at.info)
