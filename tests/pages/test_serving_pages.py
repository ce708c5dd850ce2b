"""The serving side of the pages: live streaming, the warm-up under visitors' keys, waiting times, the two paths
compared on Generation, timings again at most once a minute, Start's warm-up list."""
import os

import pytest

from pipeline.server.store.memory import RunStore, deep_size


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
    from views.request.session import DEFAULT_QUESTION, request_key
    from views.server.state import result_store, run_queue, run_store
    from views.server.waiting import model_result_key
    from views.server.warm_up import warm_up

    for entry in cache_root().iterdir():  # the weights, but empty stores of runs and of scenarios' rows
        if entry.name not in ("runs", "results"):
            (tmp_path / entry.name).symlink_to(entry)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    monkeypatch.setenv("TPE_WEIGHTS", weights)
    monkeypatch.setenv("TPE_WARM_UP", "all")  # a server's default (the tiny-model page tests prepare the request only)
    for resource in (run_store, result_store, run_queue, warm_up):  # all once-per-server resources
        resource.clear()
    from views.server.state import default_model_key, get_model

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
    from views.server.scenarios import scenario_key

    for name in scenarios():  # Start says every scenario is prepared: no trap or fix button may run the model
        records = result_store().get_or_run(model_result_key(scenario_key(name)),  # the default model's
                                            lambda: pytest.fail(f"{name} ran on first click"))
        assert isinstance(records, list) and records and isinstance(records[0], dict)


def test_warm_up_of_the_request_only_leaves_the_scenarios_to_their_page(tmp_path, monkeypatch, tiny_app):
    """TPE_WARM_UP=request: the warm-up queues the default request and no scenario, and Start says so instead of
    "all N scenarios are prepared"; the Prompt caching page still plays a scenario when it is opened."""
    from streamlit.testing.v1 import AppTest

    from pipeline.model.weights_cache import CACHE_ENV, cache_root
    from views.server.state import result_store, run_queue, run_store
    from views.server.warm_up import warm_up

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
    at = AppTest.from_file(os.path.join(os.path.dirname(__file__), "..", "..", "views", "pages", "start.py")).run()
    assert not at.exception, at.exception
    assert any("the default request is prepared" in s.value and "TPE_WARM_UP=request" in s.value
               for s in at.success), [s.value for s in at.success]
    for resource in (run_store, result_store, run_queue, warm_up):  # the other tests' server, not this one's
        resource.clear()


def test_waiting_time_reads_in_steps_that_do_not_flicker():
    from views.server.waiting import waiting_time

    assert [waiting_time(s) for s in (0, 4, 9.9, 37, 44, 95, 130)] == [
        "a few seconds", "a few seconds", "a few seconds", "40 s", "40 s", "1.5 min", "2 min"]


def test_generation_page_compares_the_two_paths_now(tiny_app):
    from kit.apptest import page_app

    at = page_app("generation")
    at.run()
    at.button(key="gen_compare").click().run()
    assert not at.exception
    labels = [m.label for m in at.metric]
    assert "plain serving path, ms/token" in labels and "captured run, ms/token" in labels
    assert any("interleaved" in m.value and "Both chose the same tokens" in m.value for m in at.markdown)



def test_timing_a_scenario_again_runs_at_most_once_a_minute(monkeypatch):
    """'Time these requests again now' replaces everyone's timings: clicks in the same minute share one replay
    (the queue alone merged only clicks that arrived while it ran)."""
    from views.server import scenarios
    from views.server import waiting

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

    from views.server import state as server_state
    from views.server import warm_up

    pending, failed = Future(), Future()
    failed.set_exception(RuntimeError("disk full"))
    monkeypatch.setattr(warm_up, "warm_up", lambda: {"the default request": pending, "prompt caching: A trap": failed})
    monkeypatch.setattr(server_state, "run_queue", lambda: [pending])
    at = AppTest.from_file(os.path.join(os.path.dirname(__file__), "..", "..", "views", "pages", "start.py")).run()
    assert not at.exception
    assert any("Preparing prompt caching: A trap failed (RuntimeError: disk full)" in w.value for w in at.warning)
    assert any("the default request." in i.value and "(1 in the model's queue now)" in i.value for i in at.info)
