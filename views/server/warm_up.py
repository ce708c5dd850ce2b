"""At server start, the work the first visitors would otherwise wait for, queued in the background."""
from __future__ import annotations

import os
from dataclasses import replace

import streamlit as st

from pipeline.model.passes import PassCounter, counting_passes
from pipeline.run.trace import run_trace
from pipeline.stages.request import ChatRequest
from views.request.session import DEFAULT_QUESTION, model_label, request_key
from views.server.scenarios import play_scenario_now, scenario_key
from views.server.state import (
    default_model_key,
    default_weights,
    get_model,
    result_store,
    run_queue,
    run_store,
    using_model,
)
from views.server.waiting import model_result_key

WARM_UP_ENV = "TPE_WARM_UP"  # "request": the default request only (a scenario is played when its page first asks
# for it); anything else, or unset: the default request and every prompt-caching scenario


def warms_scenarios() -> bool:
    """Whether the warm-up prepares the prompt-caching scenarios too (TPE_WARM_UP is not "request")."""
    return os.environ.get(WARM_UP_ENV, "all").strip() != "request"


@st.cache_resource
def warm_up() -> dict:
    """At server start: queue the default request and the prompt-caching scenarios in the background,
    so the first visitors do not wait. Returns {what: ticket} for the Start page to report on.
    On the server's default model (the one a new session starts on), whichever session came first."""
    with counting_passes(PassCounter()):  # the server's own work, not the passes of the session that came first
        return _queue_warm_up()


def _queue_warm_up() -> dict:
    from pipeline.prompt_cache.scenarios import scenarios

    model = default_model_key()
    weights = default_weights()  # a new session's weights (TPE_WEIGHTS), whatever the first session picked
    lm = get_model(model, weights)
    default = replace(ChatRequest.from_question(DEFAULT_QUESTION, weights=weights,  # a new session's request
                                                prompt_format=lm.spec.starting_format), model=model_label(lm.spec))
    key = request_key(default)
    jobs = {"the default request": run_queue().submit(
        key, lambda: run_store().get_or_run(key, lambda: run_trace(default, lm)), cost=1000)}
    for name in scenarios() if warms_scenarios() else ():  # each scenario the page opens, at its default block size
        with using_model(model, weights):
            stored_as = model_result_key(scenario_key(name))  # a new name: the lambda above reads `key`
        jobs[f"prompt caching: {scenarios()[name].title}"] = run_queue().submit(
            stored_as, lambda k=stored_as, name=name: result_store().get_or_run(
                k, lambda: play_scenario_now(lm, name)), cost=4000, background=True)
    return jobs
