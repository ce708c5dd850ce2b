"""The run a page shows: the sidebar request's stored run (run through the queue if nobody has asked
it yet), or the branch of it this session chose; and what is said when a stored run is gone."""
from __future__ import annotations

import streamlit as st

from pipeline.core.errors import InputError
from pipeline.run.record import Trace
from pipeline.stages.request import ChatRequest
from ui.escape import code_span, markdown_text
from views.chrome.frame import end_page
from views.request.branching import branch_for, branch_label
from views.request.room_questions import note_room_question
from views.request.session import current_request, request_key
from views.server.state import run_store
from views.server.waiting import run_through_queue


def shared_store_note(key: tuple) -> None:
    """One line under a run when runs are not being saved behind memory (a folder that cannot be written, a
    Redis that does not answer), or when this run is too large for the shared store (kept on this server only)."""
    store = run_store().disk
    if store is None:
        return
    if store.problem and hasattr(store, "folder"):
        st.caption(f"💾 Runs are kept in memory only, not saved in {code_span(str(store.folder))}: {store.problem}.")
    elif store.problem:
        st.caption(f"🔌 Runs are served from this server's memory: {markdown_text(store.problem)}. What is computed "
                   "meanwhile is kept here and written there once it answers again.")
    why = store.kept_local(key)
    if why:
        st.caption(f"📦 This run is kept on this server only, not in the room's shared store: {markdown_text(why)}. "
                   "A learner moved to another server would wait for it to run again.")


def run_for_request(request: ChatRequest) -> Trace:
    """The run (Trace) of `request`: the stored one, or run through the queue if nobody has asked it yet."""
    key = request_key(request)
    stored = run_store().peek(key, disk=True)
    trace = stored if stored is not None else run_through_queue(request)
    shared_store_note(key)
    return trace


def stored_sidebar_run() -> Trace | None:
    """The run of the sidebar's request if it is already stored in memory, else None (never runs the model)."""
    try:
        return run_store().peek(request_key(current_request()))
    except InputError:
        return None


def run_for_page(original: bool = False) -> Trace:
    """The run a page shows: the captured run of the sidebar's request — or the branch of it this session
    chose to show (see the What-if page) unless `original`; shows a clear message and stops on bad input."""
    try:
        request = current_request()
        note_room_question()  # a learner who followed a room asks their own question: counted for its summary
        trace = run_for_request(request)
        path = st.session_state.get("branch_shown")
        if original or not path or path[0] != request_key(request):
            return trace
        st.info(f"Showing a branch of this run: {markdown_text(branch_label(path[1], trace))}. "
                "The What-if page goes back.", icon="🌿")
        return branch_for(trace, path[1])
    except InputError as e:
        st.error(f"Please fix the request — {markdown_text(e)}")
        end_page()


RUN_GONE = ("This run is no longer stored on the server (it keeps the most recent runs, and this one was "
            "dropped since the page was drawn): press Run the model again, then download.")


def stored_download(key: tuple, render) -> str:
    """A download's content, made when the sidebar's Make button is clicked: `render(run)` of the run stored under
    `key`, or a note saying it is gone (the button outlives the page; it holds the key, not the run)."""
    run = run_store().peek(key, disk=True)
    return render(run) if run is not None else RUN_GONE
