"""One figure, one definition: a served request's TTFT and TPOT are measured once, by the queue's schedule on its
clock (pipeline.costs.named_time.served_times), and recorded on its Trace with the paths that ran its prefill and
its decode steps; the schedule, the stored run and every page show the same figures under the same labels. Runs
stored before the paths were recorded still load, named by the path they really had (captured)."""
import copy
import pickle
import threading
import time

import pytest
from kit.apptest import clear_streamlit_caches, page_app
from kit.batching import three_requests

from pipeline.costs.ceilings import device_name
from pipeline.costs.named_time import BATCHED, CAPTURED, served_times, tpot, ttft
from pipeline.server.room_schedule import room_rows


def test_served_times_is_arrival_to_first_token_and_the_mean_gap_after_it():
    assert served_times(10.0, 11.5, 12.1, 4) == (1.5, pytest.approx(0.2))  # (12.1 - 11.5) / 3 gaps
    assert served_times(10.0, 11.5, 11.5, 1) == (1.5, None)  # one token: no gap


def test_the_schedule_and_the_stored_trace_show_the_same_times_under_the_same_labels(tiny_lm):
    """Two requests through the server's own wiring (its finisher thread stores each Trace): the schedule's row and
    the stored run agree to the microsecond and name the same paths. The page's clock at submit (here 5 s before:
    the model's loading, say) is not the queue's arrival and is in neither."""
    from pipeline.server.wiring import server_queue

    stored = {}
    q = server_queue(lambda r: tiny_lm, 2048, on_trace=stored.__setitem__)
    release = threading.Event()
    q.submit("gate", lambda: release.wait(10), cost=1)  # the worker held: both wait in line, then join together
    short, long_ = three_requests()[:2]
    page_clock = time.perf_counter() - 5
    tickets = {key: q.submit(key, lambda: pytest.fail("not stepped"), batch=("trace", (key, r, page_clock)))
               for key, r in (("a", short), ("b", long_))}
    release.set()
    traces = {key: t.result(60) for key, t in tickets.items()}
    schedule = q.schedule()
    records = {r["key"]: r for r in schedule["requests"]}
    for key, trace in traces.items():
        r, timings = records[key], trace.timings
        assert stored[key] is trace  # stored before its caller heard
        assert timings.ttft_s == pytest.approx(r["ttft_s"], abs=1e-6)
        assert timings.tpot_s == pytest.approx(r["tpot_s"], abs=1e-6)
        assert r["tokens"] == trace.usage.completion_tokens > 1
        # by hand from the schedule's own times (rounded to 0.1 ms): arrival -> first token, then the mean gap
        assert timings.ttft_s == pytest.approx(r["first_token_s"] - r["queued_s"], abs=2e-4)
        assert timings.ttft_s < 5 and timings.total_s == pytest.approx(r["left_s"] - r["queued_s"], abs=2e-4)
        assert timings.tpot_s == pytest.approx((r["left_s"] - r["first_token_s"]) / (r["tokens"] - 1), abs=2e-4)
        assert (timings.prefill_path, timings.decode_path, timings.device) == (CAPTURED, BATCHED,
                                                                             device_name(tiny_lm.device))
        row = room_rows(schedule, own_key=key)["own"]
        assert (row["ttft_label"], row["tpot_label"]) == (ttft(trace).label, tpot(trace).label) == (
            "TTFT (captured run)", "TPOT (batched)")
        assert (row["ttft_s"], row["tpot_s"]) == (ttft(trace).seconds, tpot(trace).seconds)


def test_a_run_made_outside_the_server_records_its_own_path_and_clock(tiny_lm):
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest, GenerationOptions

    trace = run_trace(ChatRequest.from_question("Are tomatoes fruit?", options=GenerationOptions(max_new_tokens=4)),
                      tiny_lm)
    d, n = trace.decode, len(trace.generated_token_ids)
    assert (trace.timings.prefill_path, trace.timings.decode_path) == (CAPTURED, CAPTURED)
    assert trace.timings.device == device_name(tiny_lm.device)
    assert trace.timings.tpot_s == pytest.approx((d.last_token_at - d.first_token_at) / (n - 1))
    assert 0 < trace.timings.ttft_s < trace.timings.total_s
    assert (ttft(trace).label, tpot(trace).label) == ("TTFT (captured run)", "TPOT (captured run)")


def old_pickle(trace) -> bytes:
    """The run as a program from before the paths were recorded pickled it: no prefill_path, decode_path or device
    in its timings, no last_token_at in its decode."""
    old = copy.deepcopy(trace)
    for name in ("prefill_path", "decode_path", "device"):
        del old.timings.__dict__[name]
    del old.decode.__dict__["last_token_at"]
    return pickle.dumps(old, protocol=pickle.HIGHEST_PROTOCOL)


def test_a_run_stored_before_the_paths_were_recorded_loads_named_captured(tiny_lm, tmp_path):
    from pipeline.run.trace import run_trace
    from pipeline.server.store.disk import DiskStore
    from pipeline.stages.request import ChatRequest, GenerationOptions

    trace = run_trace(ChatRequest.from_question("Is a tomato a fruit?", options=GenerationOptions(max_new_tokens=3)),
                      tiny_lm)
    store = DiskStore(tmp_path)
    store.put("k", {"x": 1})
    store.path("k").write_bytes(old_pickle(trace))
    loaded = store.get("k")
    assert "prefill_path" not in loaded.timings.__dict__  # really the old shape
    assert (ttft(loaded).label, tpot(loaded).label) == ("TTFT (captured run)", "TPOT (captured run)")
    assert (ttft(loaded).seconds, tpot(loaded).seconds) == (trace.timings.ttft_s, trace.timings.tpot_s)
    timings = loaded.to_json()["timings"]
    assert (timings["prefill_path"], timings["decode_path"], timings["device"]) == (CAPTURED, CAPTURED, None)


def test_prefill_and_decode_names_the_room_numbers_by_the_recorded_path(tiny_app):
    """Section 5 (the room's numbers) and section 6 (the schedule) show this request's run with the same figures
    and the same labels: its prefill captured, its decode steps in the server's batch."""
    from views.server.state import run_queue, run_store

    clear_streamlit_caches()  # a fresh server: its memory holds this page's run only
    question = "Which clock times the room's numbers?"  # asked by no other test: run now, through the batch
    at = page_app("prefill_decode", req_max_new_tokens=4, req_question=question).run()
    assert not at.exception, at.exception
    own = [(r, run_store().peek(r["key"])) for r in run_queue().schedule()["requests"]]
    (record, trace), = [(r, t) for r, t in own if t is not None and question in t.request.messages[-1][1]]
    first, per_token = ttft(trace), tpot(trace)
    assert (first.label, per_token.label) == ("TTFT (captured run)", "TPOT (batched)")
    metrics = {m.label: m.value for m in at.metric}
    assert "TTFT (captured runs)" not in metrics and "TPOT (captured runs)" not in metrics
    assert (metrics[first.label], metrics[per_token.label]) == (first.shown, per_token.shown)  # the one run held
    assert any("p95" in c.value and "over 1 run" in c.value for c in at.caption)
    said = " ".join(c.value for c in at.caption)
    assert f"then {first.label} {first.shown} and {per_token.label} {per_token.shown}." in said  # section 6


def test_the_room_numbers_are_taken_per_way_of_serving():
    """Runs of different recorded paths get their own medians (pipeline.costs.metrics.room_metrics_by_path)."""
    from types import SimpleNamespace

    from pipeline.costs.metrics import room_metrics_by_path
    from pipeline.run.record import Timings

    def run(ttft_s, tpot_s, decode_path, model="SmolLM2"):
        return SimpleNamespace(timings=Timings(ttft_s, tpot_s, 0.1, ttft_s + 3 * tpot_s, CAPTURED, decode_path, "cpu"),
                               steps=[], usage=SimpleNamespace(completion_tokens=4), dims=SimpleNamespace(name=model))

    groups = room_metrics_by_path([run(1.0, 0.2, BATCHED), run(3.0, 0.4, BATCHED), run(0.5, 0.9, CAPTURED),
                                   run(7.0, 0.8, BATCHED, "Gemma")])  # the same paths on the other model: apart
    assert [(g["model"], g["ttft_label"], g["tpot_label"], g["metrics"].runs, g["metrics"].ttft_s.p50,
             g["metrics"].tpot_s.p50) for g in groups] == [
        ("SmolLM2", "TTFT (captured run)", "TPOT (batched)", 2, 2.0, pytest.approx(0.3)),
        ("SmolLM2", "TTFT (captured run)", "TPOT (captured run)", 1, 0.5, 0.9),
        ("Gemma", "TTFT (captured run)", "TPOT (batched)", 1, 7.0, 0.8)]
