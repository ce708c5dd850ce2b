"""Work sent through the model's queue, and the wait a person sees meanwhile (place in line, estimate)."""
from __future__ import annotations

import time

import streamlit as st

from pipeline.run.record import Trace
from pipeline.run.trace import run_trace
from pipeline.server.store.memory import RunStore
from pipeline.stages.request import ChatRequest
from views.request.session import request_key
from views.server.state import (
    APP_MAX_PROMPT_TOKENS,
    get_model,
    picked_model_key,
    picked_weights,
    result_store,
    run_queue,
    run_store,
    using_model,
)


def model_result_key(key: tuple) -> tuple:
    """Where a result of the picked model is stored: each model's (and weight format's) results apart."""
    return (picked_model_key(), picked_weights(), *key)


def stored_result(key: tuple, store: RunStore | None = None):
    """The picked model's result stored under model_result_key(key) by result_through_queue, or None: nothing runs.
    store: where it is kept (result_store() unless given)."""
    return (result_store() if store is None else store).peek(model_result_key(key))


def result_through_queue(key: tuple, compute, cost: int, prompt_tokens: int = 0, store: RunStore | None = None):
    """`compute()`'s result on the picked model, stored under model_result_key(key): computed once per server
    through the model's queue (its place shown meanwhile); `get_model()` inside `compute` is the picked model.
    prompt_tokens: the longest prompt it runs (a long one is refused while the queue is long).
    store: where the result is kept, result_store() unless given (a result too big for it: a small store of its own)."""
    stored = stored_result(key, store)
    if stored is not None:
        return stored
    return wait_for(submit_result(key, compute, cost, prompt_tokens, store))


def submit_result(key: tuple, compute, cost: int, prompt_tokens: int = 0, store: RunStore | None = None):
    """result_through_queue's ticket, not waited for (a lesson's runs prepared at start)."""
    model, weights, key = picked_model_key(), picked_weights(), model_result_key(key)
    store = result_store() if store is None else store  # (an empty store is falsy: len 0)

    def work():
        with using_model(model, weights):
            return store.get_or_run(key, compute)
    return run_queue().submit(key, work, cost, prompt_tokens)


def run_through_queue(request: ChatRequest) -> Trace:
    """The run (Trace) of `request`, run through the model's queue (arrival order, or joining an identical
    request already there) and stored; its place is shown meanwhile."""
    return wait_for(submit_run(request))


def submit_run(request: ChatRequest):
    """run_through_queue's ticket, not waited for (a lesson's runs prepared at start)."""
    lm, key = get_model(request.model, request.weights), request_key(request)
    work = lambda: run_store().get_or_run(key, lambda: run_trace(request, lm, APP_MAX_PROMPT_TOKENS))  # noqa: E731
    # the server prices what it admits (its trace engine tokenizes the request once): the page only submits
    return run_queue().submit(key, work, batch=("trace", (key, request, time.perf_counter())))


def wait_for(ticket) -> object:
    """Show the ticket's place in the queue and an estimate until it is done."""
    if not ticket.wait(0.3):
        box, shown = st.empty(), None
        while not ticket.wait(1.0):
            ahead = ticket.position()
            where = "running now" if ahead == 0 else f"number {ahead + 1} in line ({ahead} ahead of you)"
            message = (f"⏳ Your request is {where}; done in about {waiting_time(ticket.estimate_s())}. Requests "
                       "run in the order they arrived (a chat request joins the running batch between two steps); "
                       "identical requests share one run.")
            if message != shown:  # a room of browsers redrawing every second costs the model real CPU
                box.info(message)
                shown = message
        box.empty()
    return ticket.result()


def waiting_time(seconds: float) -> str:
    """A wait in steps a person can read and that do not change every second: 4 -> 'a few seconds',
    37 -> '40 s', 95 -> '1.5 min' (rounded to 10 s, past a minute to half minutes)."""
    if seconds < 10:
        return "a few seconds"
    if seconds < 60:
        return f"{round(seconds / 10) * 10:.0f} s"
    return f"{round(seconds / 30) / 2:g} min"
