"""Long jobs in the model's queue (pipeline.server.run_queue.RunQueue.submit_long): a generator of chunks run between
people's questions. On fake jobs whose chunks move a fake clock, so every time the queue records is exact:
a question waits for one chunk at most, a running batch gets its share of the time and the long job still moves,
the one who asked can stop it between two chunks, its progress rises, and identical asks share one run."""
import threading
from concurrent.futures import CancelledError

import pytest
from kit.batching import FakeEngine

from pipeline.core.long_jobs import Progress, run_to_end
from pipeline.server.run_queue import RunQueue


class Clock:
    """Seconds that move only when the fake work says so (read by the queue and its records)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def chunks(clock: Clock, n: int, seconds: float, log: list, during: dict | None = None):
    """A fake long job: n chunks of `seconds` each, logged; during[i](): what happens halfway through chunk i."""
    try:
        for i in range(n):
            log.append(f"chunk {i}")
            clock.advance(seconds / 2)
            (during or {}).get(i, lambda: None)()
            clock.advance(seconds / 2)
            yield Progress(i + 1, n, f"chunk {i}")
        return f"done after {n}"
    finally:
        log.append("closed")


def gated(q: RunQueue) -> threading.Event:
    """Hold the worker in a whole job until the returned event is set, so a test can fill the line first."""
    release = threading.Event()
    q.submit("gate", lambda: release.wait(10), cost=1)
    return release


def test_a_question_waits_for_one_chunk_of_a_long_job_not_for_all_of_it():
    """The question arrives halfway through chunk 3 of 10 (1 s each): it starts as that chunk ends, 0.5 s later,
    and the job goes on after it. Run whole, as a long job ran before, the same job held it for 6.5 s."""
    clock, log, asked = Clock(), [], {}

    def question():
        log.append("question")
        clock.advance(0.25)
        return "answer"

    def arrive():
        asked["ticket"] = q.submit("question", question, cost=1)

    q = RunQueue(clock=clock)
    job = q.submit_long("patching", lambda: chunks(clock, 10, 1.0, log, {3: arrive}), asker="a")
    assert job.result(10) == "done after 10"
    question_ticket = asked["ticket"]
    assert question_ticket.result(10) == "answer"
    assert log[:6] == ["chunk 0", "chunk 1", "chunk 2", "chunk 3", "question", "chunk 4"]
    recorded = q.schedule()["chunks"]
    assert [c["chunk"] for c in recorded] == list(range(11))  # 10 chunks and the one that returned the result
    assert question_ticket.submitted_at == 3.5 and question_ticket.started_at == 4.0  # the end of chunk 3
    assert question_ticket.started_at - question_ticket.submitted_at <= recorded[3]["seconds"]
    assert recorded[4]["at_s"] == 4.25  # the next chunk after the question

    # before: the same work given to the queue whole
    clock2, log2, asked2 = Clock(), [], {}
    q2 = RunQueue(clock=clock2)
    whole = q2.submit("patching", lambda: run_to_end(chunks(clock2, 10, 1.0, log2, {
        3: lambda: asked2.setdefault("ticket", q2.submit("question", lambda: log2.append("question"), cost=1))})),
        cost=1)
    whole.result(10)
    asked2["ticket"].result(10)
    assert asked2["ticket"].started_at - asked2["ticket"].submitted_at == 6.5
    assert log2.index("question") > log2.index("chunk 9")


def test_while_a_batch_decodes_a_long_job_gets_its_share_and_still_moves():
    """A chat request decoding 30 steps of 0.125 s beside a long job of 0.375 s chunks: after a chunk the batch
    steps 1.125 s (3 x that chunk, LONG_JOB_SHARE = 1/4) before the next, so its time per token grows by a third
    at most (and one first chunk), and the long job is not starved: it runs chunks while the batch decodes."""
    clock = Clock()
    engine = FakeEngine(on_step=lambda n: clock.advance(0.125))
    q = RunQueue(engines={"fake": engine}, clock=clock)
    release = gated(q)
    person = q.submit(("fake", "person"), None, cost=1, batch=("fake", ("person", 30, 4, 10)))
    log = []
    job = q.submit_long("sweep", lambda: chunks(clock, 6, 0.375, log), asker="a")
    release.set()
    assert person.result(10) == "person:30" and job.result(10) == "done after 6"
    sched = q.schedule()
    request = sched["requests"][0]
    during = [c for c in sched["chunks"] if c["at_s"] < request["left_s"]]
    assert len(during) >= 2  # not starved by the batch
    step_times = [s["t_s"] - s["seconds"] for s in sched["steps"]]  # each step's start
    for before, after in zip(during, during[1:]):
        between = [t for t in step_times if before["at_s"] < t < after["at_s"]]
        assert len(between) * 0.125 >= 3 * before["seconds"]  # the batch had 3 x the chunk's time in between
    assert request["tokens"] == 30
    decoding = request["left_s"] - request["first_token_s"]  # its 29 steps after the first, and the chunks between
    assert decoding <= 29 * 0.125 * 4 / 3 + 0.375  # a third more at most, and the first chunk (its length unknown)


def test_the_one_who_asked_stops_it_between_two_chunks_and_the_worker_is_free_again():
    clock, log = Clock(), []
    entered, go_on = threading.Event(), threading.Event()

    def hold():  # chunk 2 runs until the test has withdrawn
        entered.set()
        assert go_on.wait(10)

    q = RunQueue(clock=clock)
    job = q.submit_long("patching", lambda: chunks(clock, 10, 1.0, log, {2: hold}), asker="starter")
    assert entered.wait(10)
    assert job.progress == Progress(2, 10, "chunk 1")
    assert job.withdraw("starter") is True  # nobody else asked: it stops
    go_on.set()
    with pytest.raises(CancelledError):
        job.result(10)
    assert log == ["chunk 0", "chunk 1", "chunk 2", "closed"]  # chunk 2 finished, chunk 3 never began
    assert q.long_jobs() == [] and len(q) == 0
    assert q.submit("question", lambda: "answer", cost=1).result(10) == "answer"  # the worker is free
    again = q.submit_long("patching", lambda: chunks(clock, 2, 1.0, []), asker="starter")
    assert again is not job and again.result(10) == "done after 2"  # asked anew: a new run


def test_a_job_nobody_wants_any_more_before_its_turn_never_starts_and_one_asker_leaving_does_not_stop_it():
    clock = Clock()
    q = RunQueue(clock=clock)
    release = gated(q)
    made = []
    unwanted = q.submit_long("unwanted", lambda: made.append("unwanted") or chunks(clock, 3, 1.0, []), asker="a")
    shared = q.submit_long("shared", lambda: made.append("shared") or chunks(clock, 3, 1.0, []), asker="a")
    assert q.submit_long("shared", lambda: made.append("again") or chunks(clock, 3, 1.0, []), asker="b") is shared
    assert unwanted.withdraw("a") is True
    assert shared.withdraw("a") is False  # b still waits for it
    release.set()
    with pytest.raises(CancelledError):
        unwanted.result(10)
    assert shared.result(10) == "done after 3"
    assert made == ["shared"]  # one run for both askers; the unwanted job was never made


def test_progress_rises_chunk_by_chunk_with_an_estimate_from_its_own_chunks():
    clock, seen = Clock(), []
    q = RunQueue(clock=clock)
    holder = {}

    def watched():
        for i, p in enumerate(chunks(clock, 4, 2.0, [])):
            seen.append((holder["ticket"].progress, holder["ticket"].estimate_s()))
            yield p
        return "done"

    release = gated(q)
    holder["ticket"] = q.submit_long("job", watched, asker="a")
    assert holder["ticket"].progress is None and holder["ticket"].estimate_s() is None  # not started yet
    release.set()
    assert holder["ticket"].result(10) == "done"
    progress = [p for p, _ in seen]
    assert progress == [None, Progress(1, 4, "chunk 0"), Progress(2, 4, "chunk 1"), Progress(3, 4, "chunk 2")]
    assert [e for _, e in seen] == [None, 6.0, 4.0, 2.0]  # chunks left x 2 s each


def test_long_jobs_take_turns_and_go_before_background_preparation():
    clock, log = Clock(), []
    q = RunQueue(clock=clock)
    release = gated(q)
    prep = q.submit("prep", lambda: log.append("prep"), cost=1, background=True)
    def b_steps():
        log.append("b starts")
        return chunks(clock, 2, 1.0, log)

    a = q.submit_long("a", lambda: chunks(clock, 2, 1.0, log), asker="x")
    b = q.submit_long("b", b_steps, asker="y")
    release.set()
    a.result(10), b.result(10), prep.result(10)
    assert log.index("b starts") < log.index("chunk 1")  # b's first chunk came between a's two
    assert log[-1] == "prep"


def test_a_chunk_that_fails_tells_its_askers_and_the_queue_goes_on():
    def failing():
        yield Progress(1, 3)
        raise ValueError("the model ran out of memory")

    q = RunQueue()
    job = q.submit_long("job", failing, asker="a")
    with pytest.raises(ValueError, match="out of memory"):
        job.result(10)
    assert q.submit("question", lambda: "answer", cost=1).result(10) == "answer"
