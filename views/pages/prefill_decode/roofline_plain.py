"""Prefill & decode, section 2: the plain serving path's passes and a pass at almost no work, measured on request
(pipeline/costs/plain_steps.py), to be placed beside the captured run's on the roofline."""
from __future__ import annotations

import time
from typing import NamedTuple

import streamlit as st

from pipeline.costs.plain_steps import PLAIN_STEPS
from pipeline.costs.roofline import Placed
from pipeline.server.run_queue import cost_of
from views.request.session import request_key
from views.server.state import APP_MAX_PROMPT_TOKENS, get_model
from views.server.waiting import result_through_queue

REPEATS = 3  # plain answers of the request, each PLAIN_STEPS tokens


class PlainPasses(NamedTuple):
    prefill: Placed  # the plain path's prefill, at its TTFT
    decode: Placed  # a plain decode step, at its TPOT
    fixed: Placed  # the 1-token pass at almost no work
    measured_at: float
    fixed_operations: int  # the operations that pass runs (pipeline.costs.launches)


def plain_passes(request, n_prompt: int) -> PlainPasses | None:
    """The plain path's passes and a pass at almost no work once measured (its button), else None. Kept per request
    for everyone; a new click in a later minute measures again."""
    from_button = st.button("Measure the plain path and a pass at almost no work", key="pd_plain",
                            help=f"The request answered {REPEATS} times on the plain serving path ({PLAIN_STEPS} "
                                 "tokens each) and a 1-token pass timed 7 times.")
    if from_button:
        st.session_state["pd_plain_asked"] = time.strftime("%Y-%m-%d %H:%M")
    asked = st.session_state.get("pd_plain_asked")
    if not asked:
        return None

    def measure():
        from pipeline.costs.plain_steps import fixed_cost, place_plain, plain_points

        lm = get_model()
        run = plain_points(lm, request, PLAIN_STEPS, REPEATS, APP_MAX_PROMPT_TOKENS)
        probe = fixed_cost(lm)
        return PlainPasses(*place_plain(run, lm.dims), probe.placed, run.measured_at, probe.operations.total)

    return result_through_queue(("plain passes", request_key(request), asked), measure,
                                cost=cost_of(REPEATS * n_prompt + 1, REPEATS * PLAIN_STEPS), prompt_tokens=n_prompt)
