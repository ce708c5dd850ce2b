"""A kind of request with a share of the model's time (pipeline.server.kind_shares): the API's live streams, each a
pass of its own per step, take at most that share while the pages' requests are in the batch, and step every time
when alone; the queue skips their step while they owe the others time, and its schedule counts only real steps."""
import threading

import pytest
from kit.batching import FakeEngine

from pipeline.server.kind_shares import KindShares
from pipeline.server.run_queue import RunQueue


def test_a_kind_owes_the_others_its_time_scaled_by_its_share():
    shares = KindShares({"stream": 0.25})
    both = {"trace", "stream"}
    assert shares.may_step("stream", both) and shares.may_step("trace", both)
    shares.ran("stream", 0.2, both)
    assert shares.owed["stream"] == pytest.approx(0.6) and not shares.may_step("stream", both)
    assert shares.may_step("trace", both)  # a kind without a share always steps
    shares.ran("trace", 0.5, both)
    assert not shares.may_step("stream", both)
    shares.ran("trace", 0.1, both)
    assert shares.may_step("stream", both)
    shares.ran("trace", 5.0, both)
    assert shares.owed["stream"] == 0.0  # no credit piles up while it waits


def test_alone_in_the_batch_a_kind_steps_every_time_and_owes_nothing():
    shares = KindShares({"stream": 0.25})
    shares.ran("stream", 0.2, {"trace", "stream"})
    assert shares.may_step("stream", {"stream"})
    shares.ran("stream", 1.0, {"stream"})
    assert shares.owed["stream"] == 0.0 and shares.may_step("stream", {"trace", "stream"})


@pytest.mark.parametrize("share", [0, -0.1, 1.5])
def test_a_share_outside_0_to_1_is_refused(share):
    with pytest.raises(ValueError, match="stream"):
        KindShares({"stream": share})


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def run_beside(shares: dict | None) -> tuple[list, list]:
    """A page's request of 20 tokens (1 s a step) beside a stream of 40 (3 s a step: several passes of its own) on
    a fake clock: each engine's log of its steps."""
    clock = Clock()
    trace = FakeEngine(on_step=lambda n: setattr(clock, "t", clock.t + 1.0))
    stream = FakeEngine(on_step=lambda n: setattr(clock, "t", clock.t + 3.0))
    q = RunQueue(engines={"trace": trace, "stream": stream}, clock=clock, shares=shares)
    release = threading.Event()
    q.submit("gate", lambda: release.wait(10), cost=1)
    page = q.submit("page", lambda: None, cost=1, batch=("trace", ("page", 20, 10, 10)))
    api = q.submit("api", lambda: None, cost=1, batch=("stream", ("api", 40, 10, 10)))
    release.set()
    assert page.result(10) == "page:20" and api.result(10) == "api:40"
    steps = q.schedule()["steps"]
    assert sum(len(s["members"]) for s in steps) == 60  # one record per request's real step: 20 + 40
    return trace.log, stream.log


def test_beside_a_pages_request_a_stream_takes_its_share_then_every_step_once_alone():
    trace_log, stream_log = run_beside({"stream": 0.25})
    during = [e for e in stream_log if e[0] == "step"][:3]
    assert len(during) == 3  # while the page's 20 steps ran (20 s): 3 stream steps of 3 s each, ~ a quarter
    # the stream stepped at the page's steps 0, 9 and 18: 3 s owes 9 s of the page's
    assert len([e for e in trace_log if e[0] == "step"]) == 20
    unshared_trace, unshared_stream = run_beside(None)
    assert len([e for e in unshared_stream if e[0] == "step"]) == 40  # it still makes every token
    assert len([e for e in stream_log if e[0] == "step"]) == 40


def test_the_page_finishes_sooner_with_the_share_than_without():
    def page_done_at(shares):
        clock = Clock()
        done = {}
        trace = FakeEngine(on_step=lambda n: setattr(clock, "t", clock.t + 1.0))
        stream = FakeEngine(on_step=lambda n: setattr(clock, "t", clock.t + 3.0))
        q = RunQueue(engines={"trace": trace, "stream": stream}, clock=clock, shares=shares)
        release = threading.Event()
        q.submit("gate", lambda: release.wait(10), cost=1)
        page = q.submit("page", lambda: None, cost=1, batch=("trace", ("page", 20, 10, 10)))
        page.add_done_callback(lambda _: done.setdefault("t", clock.t))
        api = q.submit("api", lambda: None, cost=1, batch=("stream", ("api", 40, 10, 10)))
        release.set()
        api.result(10)
        return done["t"]
    alone = 20.0  # 20 steps of 1 s
    assert page_done_at(None) == pytest.approx(alone + 20 * 3.0)  # the stream's 3 s in every one of its steps
    assert page_done_at({"stream": 0.25}) <= alone * 4 / 3 + 3.0 + 1e-9  # a quarter's share, one stream step over
