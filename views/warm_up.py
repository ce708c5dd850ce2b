"""At server start, the work the first visitors would otherwise wait for, queued in the background."""
from __future__ import annotations

import streamlit as st

from pipeline.stages.request import ChatRequest
from pipeline.trace import run_trace
from views.scenarios import play_scenario_now
from views.server_state import get_model, result_store, run_queue, run_store
from views.session_request import DEFAULT_QUESTION, request_key


@st.cache_resource
def warm_up() -> dict:
    """At server start: queue the default request and the prompt-caching scenarios in the background,
    so the first visitors do not wait. Returns {what: ticket} for the Start page to report on."""
    from pipeline.prompt_cache.scenarios import scenarios

    lm = get_model()
    default = ChatRequest.from_question(DEFAULT_QUESTION)
    key = request_key(default)
    jobs = {"the default request": run_queue().submit(
        key, lambda: run_store().get_or_run(key, lambda: run_trace(default, lm)), cost=1000)}
    for name in scenarios():  # every scenario the page's buttons open, at the page's default block size
        scenario_key = ("scenario", name, 16)  # a new name: the lambda above reads `key` when it runs
        jobs[f"prompt caching: {scenarios()[name].title}"] = run_queue().submit(
            scenario_key, lambda k=scenario_key, name=name: result_store().get_or_run(
                k, lambda: play_scenario_now(lm, name)), cost=4000, background=True)
    return jobs
