"""The queue's per-step scheduler (continuous batching) on a fake engine whose steps are deterministic and
instant: requests join the running batch at the next step, leave at their own end, wait while the KV budget
is full, keep arrival order, and a whole job at the head of the line runs between two steps."""
import threading

import pytest

from pipeline.errors import InputError
from pipeline.model.passes import PassCounter, counting_passes, note_pass
from pipeline.run_queue import RunQueue


class FakeEngine:
    """payload: (name, tokens to make, prompt tokens, KV bytes). Each step every started request makes one
    token; a request ends after its `tokens`. `on_step(n)` runs inside step n (the test acts mid-batch)."""

    def __init__(self, on_step=None):
        self.live: dict[str, list] = {}  # name -> [tokens left, made]
        self.log: list = []  # ("start", name) / ("step", [names in it])
        self.on_step = on_step or (lambda n: None)
        self.steps = 0

    def reserve(self, payload):
        return payload[2], payload[3]

    def start(self, payload):
        name, tokens = payload[0], payload[1]
        if tokens < 0:
            raise InputError("messages", f"{name} is refused")
        note_pass()  # the prefill's forward pass, counted for its caller
        self.log.append(("start", name))
        self.live[name] = [tokens, []]
        return name

    def step(self):
        self.on_step(self.steps)
        self.log.append(("step", sorted(self.live)))
        ended = []
        for name, state in list(self.live.items()):
            state[1].append(self.steps)
            state[0] -= 1
            if state[0] == 0:
                ended.append((name, f"{name}:{len(state[1])}"))
                del self.live[name]
        self.steps += 1
        return ended


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
    assert (b["joined_step"], b["first_step"], b["left_step"], b["tokens"]) == (3, 3, 4, 2)
    assert [len(s["members"]) for s in sched["steps"]] == [1, 1, 1, 2, 2, 1, 1, 1]
    assert b["ttft_s"] >= 0 and b["tpot_s"] >= 0


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


def test_background_requests_wait_while_people_are_served():
    engine = FakeEngine()
    q, release = _blocked_queue(engine)
    prep = _submit(q, "prep", 1, background=True)
    person = _submit(q, "person", 3)
    assert person.position() < prep.position()
    release.set()
    assert prep.result(10) == "prep:1" and person.result(10) == "person:3"
    assert engine.log == [("start", "person")] + [("step", ["person"])] * 3 + [("start", "prep"), ("step", ["prep"])]
