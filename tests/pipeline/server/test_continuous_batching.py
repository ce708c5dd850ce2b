"""The queue's per-step scheduler (continuous batching) on a fake engine whose steps are deterministic and
instant: requests join the running batch at the next step, leave at their own end, wait while the KV budget
is full, keep arrival order, and a whole job at the head of the line runs between two steps."""
import threading

import numpy as np
import pytest
import torch
from kit.batching import FakeEngine, assert_alone_equal, staggered, three_requests

from pipeline.core.errors import InputError
from pipeline.model.passes import PassCounter, counting_passes
from pipeline.server.room_schedule import room_rows
from pipeline.server.run_queue import RunQueue


def _blocked_queue(engine, **kw):
    """A queue whose worker is held in a whole job until released, so a test can fill the line first."""
    q = RunQueue(engines={"fake": engine}, **kw)
    release = threading.Event()
    q.submit("gate", lambda: release.wait(10), cost=1)
    return q, release


def _submit(q, name, tokens, prompt=10, kv=10, **kw):
    return q.submit(name, lambda: pytest.fail("a stepped job's work is never called"), cost=prompt + tokens,
                    batch=("fake", (name, tokens, prompt, kv)), **kw)


def test_a_request_arriving_mid_batch_joins_at_the_next_step_and_leaves_at_its_own_end():
    q = RunQueue(engines={"fake": None})
    seen = {}

    def on_step(n):
        if n == 2:  # arrives during A's third step
            seen["b"] = _submit(q, "B", 2)
        if n == 5:
            seen["b done at 5"] = seen["b"].done()

    q.engines["fake"] = engine = FakeEngine(on_step)
    a = _submit(q, "A", 8)
    assert a.result(10) == "A:8" and seen["b"].result(10) == "B:2"
    steps = [names for kind, names in engine.log if kind == "step"]
    assert steps[:3] == [["A"]] * 3 and steps[3:5] == [["A", "B"]] * 2 and steps[5:] == [["A"]] * 3
    assert seen["b done at 5"]  # B's answer was handed over when B ended, while A still ran
    sched = q.schedule()
    b = next(r for r in sched["requests"] if r["key"] == "B")
    assert (b["joined_step"], b["first_step"], b["left_step"], b["tokens"], b["batch_at_join"]) == (3, 3, 4, 2, 2)
    assert [len(s["members"]) for s in sched["steps"]] == [1, 1, 1, 2, 2, 1, 1, 1]
    assert b["ttft_s"] >= 0 and b["tpot_s"] >= 0
    room = room_rows(sched, own_key="B")
    assert [(r["label"], r["own"], r["tokens"]) for r in room["rows"]] == [("learner 1", False, 8), ("you", True, 2)]
    assert [s["size"] for s in room["steps"]] == [1, 1, 1, 2, 2, 1, 1, 1] and room["own"]["label"] == "you"
    assert "B" not in str([r["label"] for r in room["rows"]]) and room_rows(sched)["own"] is None


def test_the_kv_budget_holds_the_head_of_the_line_and_nobody_overtakes_it():
    engine = FakeEngine()
    q, release = _blocked_queue(engine, kv_budget_bytes=100)
    a, b, c = _submit(q, "A", 3, kv=60), _submit(q, "B", 1, kv=60), _submit(q, "C", 1, kv=10)
    release.set()
    assert [t.result(10) for t in (a, b, c)] == ["A:3", "B:1", "C:1"]
    # A alone fills 60 of 100 bytes; B (60 more) waits for A to leave; C (10) fits but must not overtake B
    assert engine.log == [("start", "A"), ("step", ["A"]), ("step", ["A"]), ("step", ["A"]),
                          ("start", "B"), ("start", "C"), ("step", ["B", "C"])]


def test_prefill_between_steps_is_bounded_in_prompt_tokens_and_the_batch_in_size():
    engine = FakeEngine()
    q, release = _blocked_queue(engine, prefill_tokens_per_step=250, max_batch=2)
    tickets = [_submit(q, n, 4, prompt=200) for n in "ABC"]
    release.set()
    assert [t.result(10) for t in tickets] == ["A:4", "B:4", "C:4"]
    assert engine.log[:4] == [("start", "A"), ("step", ["A"]), ("start", "B"), ("step", ["A", "B"])]
    # two at most: C waits for A to leave (A ends in the step after B's third)
    assert engine.log[4:8] == [("step", ["A", "B"]), ("step", ["A", "B"]), ("start", "C"), ("step", ["B", "C"])]


def test_a_whole_job_in_the_line_runs_between_two_steps_in_its_turn():
    order = []
    q = RunQueue(engines={"fake": None})

    def on_step(n):
        if n == 1:
            q.submit("plain", lambda: order.append(("plain", engine.steps)), cost=1)
            _submit(q, "B", 1)  # behind the plain job: admitted after it

    q.engines["fake"] = engine = FakeEngine(on_step)
    _submit(q, "A", 4).result(10)
    assert order == [("plain", 2)]  # after step 1, before step 2
    assert engine.log.index(("start", "B")) == 3 and engine.log[4] == ("step", ["A", "B"])


def test_a_refused_request_tells_its_caller_only_and_callers_keep_their_pass_counters():
    engine = FakeEngine()
    q, release = _blocked_queue(engine)
    counter = PassCounter()
    with counting_passes(counter):
        ok = _submit(q, "ok", 2)
    bad = _submit(q, "bad", -1)
    same = _submit(q, "ok", 2)
    assert same is ok  # identical requests share one ticket
    release.set()
    assert ok.result(10) == "ok:2"
    with pytest.raises(InputError, match="refused"):
        bad.result(10)
    assert counter.n == 1  # the prefill ran in its caller's context


class PricingEngine(FakeEngine):
    """A fake engine that prices its requests as the real ones do: (cost, prompt tokens) from the payload."""

    def price(self, payload):
        return payload[1] * 100 + payload[2], payload[2]


def test_the_server_prices_what_it_admits_and_a_page_only_submits():
    """A request given no cost is priced by its engine: its cost orders the estimates, and its prompt's length
    is what a long queue refuses (a page used to tokenize the request itself to price it)."""
    from pipeline.server.run_queue import LONG_PROMPT_TOKENS, LONG_QUEUE

    q, release = _blocked_queue(PricingEngine())
    short = q.submit("short", lambda: None, batch=("fake", ("short", 2, 10, 10)))
    assert short.cost == 2 * 100 + 10
    for i in range(LONG_QUEUE):
        q.submit(f"filler {i}", lambda: None, cost=1)
    with pytest.raises(InputError, match=f"{LONG_PROMPT_TOKENS + 1:,} tokens now"):
        q.submit("long", lambda: None, batch=("fake", ("long", 2, LONG_PROMPT_TOKENS + 1, 10)))
    with pytest.raises(ValueError, match="gives its cost"):
        q.submit("whole job", lambda: None)
    release.set()


def test_the_trace_engine_tokenizes_a_request_once_to_price_and_admit_it(tiny_lm, monkeypatch):
    """price() and reserve() of the same request share one tokenization, and agree with the rules computed apart."""
    from pipeline.server import trace_engine as te
    from pipeline.server.run_queue import cost_of
    from pipeline.stages.kv_cache import held_bytes
    from pipeline.stages.request import ChatRequest, GenerationOptions
    from pipeline.stages.tokens import tokenize_request

    request = ChatRequest.from_question("Are tomatoes fruit?", options=GenerationOptions(max_new_tokens=7))
    n = len(tokenize_request(tiny_lm.tokenizer, request).ids)
    calls = []
    monkeypatch.setattr(te, "tokenize_request", lambda *a: calls.append(a) or tokenize_request(*a))
    engine = te.TraceEngine(lambda r: tiny_lm, 4096)
    payload = ("key", request, 0.0)
    assert engine.price(payload) == (cost_of(n, 7), n)
    assert engine.reserve(payload) == (n, sum(held_bytes(tiny_lm.dims, n + 7)))
    assert engine.price(payload) == (cost_of(n, 7), n)
    assert len(calls) == 1


def test_background_requests_wait_while_people_are_served():
    engine = FakeEngine()
    q, release = _blocked_queue(engine)
    prep = _submit(q, "prep", 1, background=True)
    person = _submit(q, "person", 3)
    assert person.position() < prep.position()
    release.set()
    assert prep.result(10) == "prep:1" and person.result(10) == "person:3"
    assert engine.log == [("start", "person")] + [("step", ["person"])] * 3 + [("start", "prep"), ("step", ["prep"])]


def test_a_request_whose_record_is_finished_elsewhere_leaves_the_batch_at_once_and_its_caller_hears_later():
    """An engine may hand back a Future of an ended request's record (TraceEngine with a finisher): the request
    leaves the batch and the KV budget at its end, the batch steps on, and the ticket resolves when the record
    does: with the record, or with the error that made it."""
    from concurrent.futures import Future

    records = {"A": Future(), "B": Future()}

    class Finishing(FakeEngine):
        def step(self):
            return [(name, records.get(name, result)) for name, result in super().step()]  # C's at once

    engine = Finishing()
    q, release = _blocked_queue(engine, kv_budget_bytes=100)
    a, b, c = _submit(q, "A", 1, kv=60), _submit(q, "B", 3, kv=40), _submit(q, "C", 2, kv=60)
    release.set()
    for _ in range(500):  # C needs A's 60 bytes of budget: it is admitted only once A has left
        if ("start", "C") in engine.log:
            break
        threading.Event().wait(0.01)
    assert ("start", "C") in engine.log and not a.done()  # A left the batch; its record is not ready yet
    assert c.result(10) == "C:2"  # the batch stepped on without A's record
    records["A"].set_result("A's trace")
    records["B"].set_exception(InputError("messages", "B's record failed"))
    assert a.result(10) == "A's trace"
    with pytest.raises(InputError, match="B's record failed"):
        b.result(10)
    again = _submit(q, "A", 1)
    assert again is not a and again.result(10) == "A's trace"  # a done ticket is not joined: it ran anew


def test_a_trace_engine_with_a_finisher_makes_the_same_traces_as_without(tiny_lm):
    """The finisher only moves where a Trace is assembled and stored: the same tokens, steps and storage."""
    from concurrent.futures import Future, ThreadPoolExecutor

    from pipeline.server.trace_engine import TraceEngine

    requests = three_requests()
    inline = staggered(tiny_lm, requests, [0, 0, 0])[0]  # all three in the batch from the start, as below
    stored = {}
    with ThreadPoolExecutor(max_workers=1) as finisher:
        engine = TraceEngine(lambda r: tiny_lm, on_trace=stored.__setitem__, finisher=finisher)
        handles = {engine.start((i, r, None)): i for i, r in enumerate(requests)}
        futures = {}
        while len(futures) < len(requests):
            futures.update((handles[h], f.complete(None)) for h, f in engine.step())  # as the queue does
        assert all(isinstance(f, Future) for f in futures.values())
        traces = [futures[i].result(30) for i in range(len(requests))]
    assert [t.decode.generated_ids for t in traces] == [t.decode.generated_ids for t in inline]
    assert all(np.array_equal(t.decode.step_logits, u.decode.step_logits) for t, u in zip(traces, inline))
    assert [stored[i] for i in range(len(requests))] == traces  # stored before each caller was told


# ---- the batched decode step on tiny random-weight models ----------------------------------------


def test_requests_joining_a_running_batch_get_the_tokens_they_get_alone(tiny_lm):
    requests = three_requests()
    traces = staggered(tiny_lm, requests, join_at=[0, 2, 3])[0]  # the longer prompt joins later: the rows re-pad
    assert_alone_equal(tiny_lm, traces, requests)
    assert [s.batch_size for s in traces[0].steps] == [1, 1, 2, 3, 3, 3]  # B joined at step 2, C at 3
    assert [s.batch_size for s in traces[1].steps] == [2, 3, 3, 3, 1, 1, 1, 1]  # A and C left at their ends


def test_answers_joining_and_leaving_between_two_steps_cost_one_merge_of_the_cache(tiny_lm):
    """A join leaves the running cache as it is; the next step merges every joiner and every row that left
    into one new cache (each row's own positions at its right end, zeros and a 0 mask in the padding)."""
    from pipeline.model.kv_tensors import cache_layers
    from pipeline.server.trace_engine import TraceEngine

    short, long_, mid = three_requests()
    engine = TraceEngine(lambda r: tiny_lm)
    engine.start((0, short, None))  # 6 tokens
    engine.step()
    batch = next(iter(engine.batches.values()))
    running = batch.cache
    for n in range(4):
        engine.step()  # "Hi" makes its 5th token; it leaves at the next step, as the two others join
    engine.start((1, long_, None))
    engine.start((2, mid, None))
    joiners = [row for row, _ in batch.joining]
    own = [[k.clone() for k, _ in layers] for _, layers in batch.joining]
    assert batch.cache is running and len(batch.rows) == 1  # nothing copied at the joins
    ended = engine.step()  # "Hi" ends here: one merge keeps the two joiners only
    assert len(ended) == 1 and batch.rows == joiners and not batch.joining
    T = max(r.length for r in joiners)
    assert batch.mask.shape == (2, T)
    for i, row in enumerate(joiners):
        n = row.length - 1  # the merged cache, before this step's token went in, plus that token
        assert batch.mask[i].tolist() == [0] * (T - row.length) + [1] * row.length
        for layer, (k, _) in enumerate(cache_layers(batch.cache)):
            assert torch.equal(k[i, :, T - row.length:T - row.length + n], own[i][layer][0])
            assert not k[i, :, :T - row.length].any()


def test_the_joined_cache_takes_each_step_in_place_and_goes_on_as_hf_once_its_room_is_used(tiny_lm):
    """HF's DynamicCache copies the whole cache at every step (torch.cat); the batch's cache writes the new
    position into room it made at the merge. Past that room a layer concatenates as HF's does, same values."""
    from pipeline.model.kv_tensors import cache_layers, cache_with_room
    from pipeline.server.trace_engine import TraceEngine

    engine = TraceEngine(lambda r: tiny_lm)
    engine.start((0, three_requests()[0], None))
    engine.step()
    batch = next(iter(engine.batches.values()))
    keys = cache_layers(batch.cache)[0][0]
    engine.step()
    after = cache_layers(batch.cache)[0][0]
    assert after.shape[2] == keys.shape[2] + 1 and after.data_ptr() == keys.data_ptr()  # the same buffer

    L = tiny_lm.dims.L
    like = torch.zeros(1)
    cache = cache_with_room([(1, 1, 2, 2)] * L, like, tiny_lm.config, room=1)
    for k, v in cache_layers(cache):
        k[:], v[:] = 1.0, 2.0
    new = [torch.full((1, 1, 1, 2), float(n)) for n in (3, 4)]
    for x in new:
        k, v = cache.update(x, x + 10, layer_idx=0)
    assert torch.equal(k, torch.cat([torch.ones(1, 1, 2, 2), *new], dim=2))
    assert torch.equal(v, torch.cat([torch.full((1, 1, 2, 2), 2.0), *(x + 10 for x in new)], dim=2))
    assert cache.get_seq_length(0) == 4


def test_a_join_that_fits_and_a_leave_are_made_in_place_in_the_joined_cache(tiny_lm):
    """Once the batch's cache has spare rows and room, a shorter joiner is written into a spare row and a row
    that leaves is filled by the last row: the buffers stay the same (the answers equal alone:
    test_requests_joining_a_running_batch_get_the_tokens_they_get_alone joins and leaves in place too)."""
    from pipeline.model.kv_tensors import cache_layers
    from pipeline.server.trace_engine import TraceEngine

    a, b, c = three_requests()
    engine = TraceEngine(lambda r: tiny_lm)
    engine.start((0, b, None))  # the longest prompt first: the later ones fit in its width
    engine.step()
    batch = next(iter(engine.batches.values()))
    buffer = cache_layers(batch.cache)[0][0].data_ptr()
    engine.start((2, c, None))  # 3 tokens
    engine.start((1, a, None))  # 6 tokens
    engine.step()  # both join in place
    assert cache_layers(batch.cache)[0][0].data_ptr() == buffer and len(batch.rows) == 3
    row_b, row_c, row_a = batch.rows
    while row_c.result is None:
        engine.step()
    assert row_a.result is None and row_b.result is None
    assert batch.rows == [row_b, row_a]  # the last row moved into the hole "Why?" left
    assert cache_layers(batch.cache)[0][0].data_ptr() == buffer and batch.mask.shape[0] == 2
    T = batch.mask.shape[1]
    assert batch.mask[1].tolist() == [0] * (T - row_a.length) + [1] * row_a.length


def test_gemma_requests_joining_a_running_batch_get_the_tokens_they_get_alone(gemma_tokenizer):
    """Sliding window 64, longer than prompt + answer: every cache pads into the batch (past the window each
    steps on its own cache: tests/pipeline/model/test_architectures.py, batched answers past the window)."""
    from kit.tiny_models import tiny_gemma3, wrap

    model = tiny_gemma3(gemma_tokenizer)
    model.config.sliding_window = 64
    for block in model.model.layers:
        block.self_attn.sliding_window = 64 if block.self_attn.sliding_window else None
    lm = wrap(model, gemma_tokenizer, "tiny-gemma3")
    requests = three_requests()
    traces = staggered(lm, requests, join_at=[0, 1, 1])[0]
    assert_alone_equal(lm, traces, requests)


# ---- the real model ----------------------------------------------------------------------------------
def first_flip(joined, alone) -> dict | None:
    """Where a joined run's greedy tokens first part from the run alone: the step, and the alone run's gap
    between its top two logits there (a flip is only fair on a near tie)."""
    for step, (a, b) in enumerate(zip(alone.generated_token_ids, joined.generated_token_ids)):
        if a != b:
            top2 = np.sort(alone.step_logits[step])[-2:]
            return {"step": step, "gap": float(top2[1] - top2[0]),
                    "diff": float(np.abs(alone.step_logits[step] - joined.step_logits[step]).max())}
    return None


@pytest.mark.model
@pytest.mark.parametrize("model", ["lm", "gemma_lm"])
def test_continuously_batched_greedy_answers_equal_each_request_alone(model, request):
    """Real weights: three greedy requests of different lengths join one running batch at different steps;
    each answer equals the request run alone, or the first flip is a near tie (its logit gap is reported)."""
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest, GenerationOptions

    lm = request.getfixturevalue(model)
    requests = [ChatRequest.from_question(q, options=GenerationOptions(max_new_tokens=n)) for q, n in [
        ("Are tomatoes fruit?", 8), ("Explain in two sentences why the sky is blue during the day.", 6),
        ("Hi", 3)]]
    for joined, r in zip(staggered(lm, requests, join_at=[0, 2, 3])[0], requests):
        alone = run_trace(r, lm)
        flip = first_flip(joined, alone)
        n = min(len(alone.steps), len(joined.steps))
        print(f"{lm.name}: {r.messages[-1][1]!r}: largest logit difference "
              f"{np.abs(joined.step_logits[:n] - alone.step_logits[:n]).max():.2e}, flip: {flip}")
        assert flip is None or flip["gap"] <= 2 * flip["diff"], flip
        if flip is None:
            assert joined.generated_token_ids == alone.generated_token_ids


def test_a_failed_step_reaches_every_request_in_the_batch_and_the_queue_goes_on():
    def on_step(n):
        if n == 1 and not engine.failed:
            engine.failed = True
            engine.live.clear()  # the engine drops what it held, as TraceEngine does
            raise RuntimeError("out of memory")

    engine = FakeEngine(on_step)
    engine.failed = False
    q, release = _blocked_queue(engine)
    a, b = _submit(q, "A", 5), _submit(q, "B", 5)
    release.set()
    for t in (a, b):
        with pytest.raises(RuntimeError, match="memory"):
            t.result(10)
    assert _submit(q, "C", 2).result(10) == "C:2"


def test_each_session_counts_the_batched_passes_its_own_request_took_part_in(tiny_lm):
    """Two sessions' requests through the real queue: prefilled in one batched pass, decoded in one batch until
    the shorter one ends. Each session counts the passes its request was in (the shared ones as shared), not
    whichever session's context the queue's worker happened to run the batch in (before: one got them all)."""
    from pipeline.server.trace_engine import TraceEngine
    from views.request.session import passes_caption

    short, long_ = three_requests()[:2]  # 6 and 8 new tokens
    q = RunQueue(engines={"trace": TraceEngine(lambda r: tiny_lm)})
    release = threading.Event()
    q.submit("gate", lambda: release.wait(10), cost=1)  # both wait, so they are admitted in the same gap
    mine, theirs = PassCounter(), PassCounter()
    with counting_passes(mine):
        a = q.submit("a", lambda: pytest.fail("stepped"), cost=1, batch=("trace", ("a", short, None)))
    with counting_passes(theirs):
        b = q.submit("b", lambda: pytest.fail("stepped"), cost=1, batch=("trace", ("b", long_, None)))
    before = tiny_lm.calls
    release.set()
    traces = a.result(60), b.result(60)
    everyone = tiny_lm.calls - before
    assert [t.steps[0].batch_size for t in traces] == [2, 2]  # decoded together from the first step
    decode_passes = [len(t.steps) - 1 for t in traces]  # a pass per token fed: the first comes from the prefill
    assert decode_passes == [5, 7] and everyone == 1 + 7  # one batched prefill, then 7 decode steps
    assert (mine.n, mine.shared) == (1 + 5, 1 + 5)  # every pass of its request ran the other one too
    assert (theirs.n, theirs.shared) == (1 + 7, 1 + 5)  # its last 2 steps ran alone
    assert mine.n + theirs.n - mine.shared == everyone  # each pass counted once per session in it
    assert passes_caption(theirs) == ("Forward passes run for your session: 8 (6 of them batched passes shared "
                                      "with other requests).")
    assert passes_caption(PassCounter(n=3)) == "Forward passes run for your session: 3."
