"""The run queue: arrival order, shared tickets, long prompts refused while the queue is long, background work yielding
to people, the cost of a run."""
import threading

import pytest

from pipeline.core.errors import InputError
from pipeline.server.run_queue import LONG_PROMPT_TOKENS, LONG_QUEUE, RunQueue, cost_of


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
    from views.pages.generation import live_stream

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
