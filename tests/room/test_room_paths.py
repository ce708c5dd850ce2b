"""The room's schedule names each request's TTFT and TPOT by the path that ran it (pipeline.costs.named_time) and
the device, recorded by the queue's step engines; times of different paths are never pooled into one median."""
import threading

import pytest
from kit.batching import three_requests
from streamlit.testing.v1 import AppTest

from pipeline.costs.ceilings import device_name
from pipeline.costs.named_time import BATCHED, CAPTURED, PLAIN, time_label
from pipeline.server.room_schedule import room_rows
from pipeline.server.run_queue import RunQueue


def _served(q, kind, payloads):
    """Submit every payload while the worker is held, so they are admitted together; wait for each."""
    release = threading.Event()
    q.submit("gate", lambda: release.wait(10), cost=1)
    tickets = [q.submit(key, lambda: pytest.fail("stepped"), batch=(kind, payload)) for key, payload in payloads]
    release.set()
    for t in tickets:
        t.result(60)
    return {r["key"]: r for r in q.schedule()["requests"]}


def test_the_queue_records_the_trace_engines_paths_and_device(tiny_lm):
    """A captured run through the server: its prefill on the captured path, its steps in the batch's one pass."""
    from pipeline.server.trace_engine import TraceEngine

    short, long_ = three_requests()[:2]
    q = RunQueue(engines={"trace": TraceEngine(lambda r: tiny_lm)})
    records = _served(q, "trace", [("a", ("a", short, None)), ("b", ("b", long_, None))])
    for key in "ab":
        assert (records[key]["prefill_path"], records[key]["decode_path"]) == (CAPTURED, BATCHED)
        assert records[key]["device"] == device_name(tiny_lm.device) and records[key]["device"].startswith("cpu")
        assert records[key]["model"] == tiny_lm.name
    room = room_rows(q.schedule(), own_key="a")
    assert (room["own"]["ttft_label"], room["own"]["tpot_label"]) == ("TTFT (captured run)", "TPOT (batched)")


def test_the_queue_records_the_stream_engines_plain_path(tiny_lm):
    """A live answer: prefilled and stepped on the plain path's decoder of its own (no recording hooks)."""
    from pipeline.server.trace_engine import StreamEngine

    q = RunQueue(engines={"stream": StreamEngine(lambda r: tiny_lm)})
    record = _served(q, "stream", [("s", (three_requests()[0], None))])["s"]
    assert (record["prefill_path"], record["decode_path"], record["device"]) == (PLAIN, PLAIN,
                                                                               device_name(tiny_lm.device))


def _request(key, queued, ttft, tpot, prefill_path, decode_path, device="cpu (x86_64, 2 threads)"):
    return {"key": key, "queued_s": queued, "prefill_at_s": queued, "prefill_s": 0.1, "left_s": queued + 5,
            "ttft_s": ttft, "tpot_s": tpot, "tokens": 8, "prefill_path": prefill_path, "decode_path": decode_path,
            "device": device}


SCHEDULE = {"steps": [], "requests": [
    _request("a", 0.0, 1.0, 0.20, CAPTURED, BATCHED), _request("b", 1.0, 3.0, 0.40, CAPTURED, BATCHED),
    _request("c", 2.0, 0.2, 0.04, PLAIN, PLAIN), _request("d", 3.0, 9.0, 0.90, None, None)]}


def test_times_of_different_paths_are_kept_apart():
    groups = room_rows(SCHEDULE)["groups"]
    assert [(g["ttft_label"], g["tpot_label"], g["requests"], g["ttft_s"], g["tpot_s"]) for g in groups] == [
        (time_label("TTFT", CAPTURED), time_label("TPOT", BATCHED), 2, 2.0, pytest.approx(0.30)),
        (time_label("TTFT", PLAIN), time_label("TPOT", PLAIN), 1, 0.2, 0.04),
        ("TTFT (path not recorded)", "TPOT (path not recorded)", 1, 9.0, 0.9)]


def test_times_of_different_models_are_kept_apart():
    """A room serves both models in one queue: the same paths on another model are another figure (a median over
    a SmolLM2 request and a Gemma one was shown as one TTFT)."""
    schedule = {"steps": [], "requests": [{**_request("a", 0.0, 1.0, 0.10, CAPTURED, BATCHED), "model": "SmolLM2"},
                                          {**_request("b", 1.0, 5.0, 0.30, CAPTURED, BATCHED), "model": "Gemma"},
                                          {**_request("c", 2.0, 2.0, 0.20, CAPTURED, BATCHED), "model": "SmolLM2"}]}
    groups = room_rows(schedule)["groups"]
    assert [(g["model"], g["requests"], g["ttft_s"]) for g in groups] == [("SmolLM2", 2, 1.5), ("Gemma", 1, 5.0)]


def _schedule_page():
    from views.pages.prefill_decode.room_schedule import room_schedule

    room_schedule("a")


def test_the_schedule_shows_each_median_named_by_its_path(monkeypatch):
    from types import SimpleNamespace

    from views.pages.prefill_decode import room_schedule

    monkeypatch.setattr(room_schedule, "run_queue", lambda: SimpleNamespace(schedule=lambda: SCHEDULE))
    at = AppTest.from_function(_schedule_page).run()
    assert not at.exception
    caption = next(c.value for c in at.caption if "median" in c.value)
    assert ("median TTFT (captured run) 2.00 s, TPOT (batched) 300 ms on cpu (x86_64, 2 threads) (2 requests); "
            "median TTFT (plain path) 200 ms, TPOT (plain path) 40 ms") in caption
    assert "then TTFT (captured run) 1.00 s and TPOT (batched) 200 ms." in caption  # the learner's own
    assert "kept apart" in caption
