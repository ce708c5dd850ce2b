"""A kind of request with a share of the model's time (pipeline.server.kind_shares): the API's streams, each a
pass of its own per step, take at most that share while the pages' requests are in the batch, and step every time
when alone; the queue skips their step while they owe the others time, and its schedule counts only real steps."""
import threading

import pytest
from kit.batching import FakeEngine

from pipeline.server.kind_shares import KindShares
from pipeline.server.run_queue import RunQueue


def test_a_kind_owes_the_others_its_time_scaled_by_its_share():
    shares = KindShares({"api": 0.25})
    both = {"trace", "api"}
    assert shares.may_step("api", both) and shares.may_step("trace", both)
    shares.ran("api", 0.2, both)
    assert shares.owed["api"] == pytest.approx(0.6) and not shares.may_step("api", both)
    assert shares.may_step("trace", both)  # a kind without a share always steps
    shares.ran("trace", 0.5, both)
    assert not shares.may_step("api", both)
    shares.ran("trace", 0.1, both)
    assert shares.may_step("api", both)
    shares.ran("trace", 5.0, both)
    assert shares.owed["api"] == 0.0  # no credit piles up while it waits


def test_alone_in_the_batch_a_kind_steps_every_time_and_owes_nothing():
    shares = KindShares({"api": 0.25})
    shares.ran("api", 0.2, {"trace", "api"})
    assert shares.may_step("api", {"api"})
    shares.ran("api", 1.0, {"api"})
    assert shares.owed["api"] == 0.0 and shares.may_step("api", {"trace", "api"})


@pytest.mark.parametrize("share", [0, -0.1, 1.5])
def test_a_share_outside_0_to_1_is_refused(share):
    with pytest.raises(ValueError, match="api"):
        KindShares({"api": share})


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def run_beside(shares: dict | None) -> list[str]:
    """A page's request of 20 tokens (1 s a step) beside an API stream of 40 (3 s a step: several passes of its own)
    on a fake clock: the kinds in the order their steps ran."""
    clock, order = Clock(), []

    def stepping(kind: str, seconds: float):
        def on_step(n):
            order.append(kind)
            clock.t += seconds
        return on_step
    q = RunQueue(engines={"trace": FakeEngine(stepping("trace", 1.0)), "api": FakeEngine(stepping("api", 3.0))},
                 clock=clock, shares=shares)
    release = threading.Event()
    q.submit("gate", lambda: release.wait(10), cost=1)
    page = q.submit("page", lambda: None, cost=1, batch=("trace", ("page", 20, 10, 10)))
    api = q.submit("api", lambda: None, cost=1, batch=("api", ("api", 40, 10, 10)))
    release.set()
    assert page.result(10) == "page:20" and api.result(10) == "api:40"
    steps = q.schedule()["steps"]
    assert sum(len(s["members"]) for s in steps) == 60  # one record per request's real step: 20 + 40
    return order


def test_beside_a_pages_request_an_api_stream_takes_its_share_then_every_step_once_alone():
    order = run_beside({"api": 0.25})
    while_the_page_ran = order[:len(order) - order[::-1].index("trace")]
    # its 3 s step owes 9 s of the page's, paid before the step it is next due in: beside the page's steps 0 and 10
    # (6 s of the page's 26 s, under a quarter)
    assert while_the_page_ran.count("api") == 2 and while_the_page_ran.count("trace") == 20
    assert order.count("api") == 40  # then alone, every step: it still makes every token
    unshared = run_beside(None)
    assert unshared[:40] == ["trace", "api"] * 20  # without a share: a stream step beside every page step


def test_the_page_finishes_sooner_with_the_share_than_without():
    def page_done_at(shares):
        order = run_beside(shares)
        steps = order[:len(order) - order[::-1].index("trace")]
        return steps.count("trace") * 1.0 + steps.count("api") * 3.0
    alone = 20.0  # 20 steps of 1 s
    assert page_done_at(None) == pytest.approx(alone + 19 * 3.0)  # the stream's 3 s beside each of its steps
    assert page_done_at({"api": 0.25}) <= alone * 4 / 3 + 3.0 + 1e-9  # a quarter's share, one stream step over
