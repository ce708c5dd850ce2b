"""A long job on a page (activation patching, comparing models, the batching sweep): run through the model's
queue a chunk at a time behind people's questions (pipeline.server.run_queue.RunQueue.submit_long), its progress shown
with a Cancel button, its result kept for everyone who asks the same, with when it was made.

    finished = long_job(("patching", ...), lambda: patch_residual_steps(lm, ...), "activation patching",
                        start=st.button("Patch"))
    if finished is not None: draw(finished.value)        # None: not asked here, running, or stopped

The page waits for it in its own run for up to IN_PAGE_WAIT_S (quick jobs draw at once, as before); past that,
a panel that refreshes itself every REFRESH_S follows it and the rest of the page is drawn and usable. The
Cancel button withdraws this session: the job stops between two chunks once nobody who asked wants it.
"""
from __future__ import annotations

import secrets
import time
from concurrent.futures import CancelledError
from typing import Callable

import streamlit as st

from pipeline.core.long_jobs import Finished, Steps
from views.server.state import result_store, run_queue
from views.server.waiting import model_result_key, waiting_time

IN_PAGE_WAIT_S = 120.0  # the page's own run waits this long for a job, then hands over to the refreshing panel
REFRESH_S = 5.0  # the panel refreshes this often (a room of 30 following jobs: 6 small page runs a second)


def long_job(key: tuple, steps: Callable[[], Steps], what: str, start: bool) -> Finished | None:
    """The picked model's result of the long job `key` (stored under model_result_key(key)): shown to any session
    once someone has made it. Else, when `start` (its button was pressed): queued, or joined if someone else asked
    for the same, and waited for in this run with its progress drawn; while this session waits for it (later
    runs): the refreshing panel. Its result once done, else None. `steps()` makes the job's generator
    (pipeline.core.long_jobs), called once, in the queue's worker; `what` names the job in a sentence ("activation
    patching"). A job that failed raises its error here (the page shows it, as for any bad input)."""
    key = model_result_key(key)
    stored = result_store().peek(key)
    mine = _tickets()
    if stored is not None:
        mine.pop(key, None)
        return stored
    ticket = mine.get(key)
    if ticket is not None:
        if ticket.done():
            return _outcome(key)
        _follow(key, what)
        return None
    if not start:
        note = _notes().get(key)
        if note:
            st.info(note)
        return None
    _notes().pop(key, None)
    store = result_store()
    mine[key] = run_queue().submit_long(key, lambda: _kept(store, key, steps), _asker())
    return _wait_in_page(key, what)


def stopped_here(key: tuple) -> bool:
    """Whether this session cancelled the long job `key` (and has not started it again since)."""
    return model_result_key(key) in _notes()


def made_line(finished: Finished) -> str:
    """'Made at 14:03 (5 min ago) in 1.9 min; kept for everyone who asks the same.'"""
    ago = max(0.0, time.time() - finished.made_at)
    return (f"Made at {time.strftime('%H:%M', time.localtime(finished.made_at))} "
            f"({'just now' if ago < 60 else waiting_time(ago) + ' ago'}) in {waiting_time(finished.took_s)}; "
            "kept for everyone who asks the same.")


def progress_line(ticket, what: str) -> tuple[float, str]:
    """(fraction done, the sentence under the bar) of a long job's ticket."""
    p, what = ticket.progress, what[:1].upper() + what[1:]
    if p is None:
        return 0.0, (f"⏳ {what} is waiting for its turn: it runs a part at a time whenever the model has no "
                     "question to answer.")
    estimate = ticket.estimate_s()
    left = "" if estimate is None else f"; about {waiting_time(estimate)} left"
    return p.fraction, (f"⏳ {what}: {p.done} of {p.total} parts done ({p.note}){left}. It runs a part at a time "
                        "behind people's questions; identical requests share one run.")


def _kept(store, key: tuple, steps: Callable[[], Steps]):
    """The job's chunks, then its result kept in the results store with when it was made (in the worker)."""
    started = time.time()
    value = yield from steps()
    finished = Finished(value, made_at=time.time(), took_s=time.time() - started)
    store.put(key, finished)
    return finished


def _asker() -> str:
    """This session's anonymous id as the one who asked (never shown)."""
    return st.session_state.setdefault("long_job_asker", secrets.token_hex(8))


def _tickets() -> dict:
    """{key: ticket} of the long jobs this session waits for."""
    return st.session_state.setdefault("long_job_tickets", {})


def _notes() -> dict:
    """{key: what this session was told when it stopped waiting} until it starts that job again."""
    return st.session_state.setdefault("long_job_notes", {})


def _outcome(key: tuple) -> Finished | None:
    """A finished ticket of this session: its result, or its error raised (a stopped one: None)."""
    ticket = _tickets().pop(key)
    error = ticket.exception()
    if isinstance(error, CancelledError):
        return None
    if error is not None:
        raise error
    return ticket.result()


def _cancel(key: tuple, what: str) -> None:
    """The Cancel button: this session stops waiting; the job stops between two chunks if nobody else wants it."""
    ticket = _tickets().pop(key, None)
    if ticket is None:
        return
    p = ticket.progress
    at = f" after {p.done} of its {p.total} parts" if p is not None else " before it started"
    _notes()[key] = (f"You stopped {what}{at}." if ticket.withdraw(_asker()) else
                     f"You stopped waiting for {what}; others asked for it too, so it goes on for them, and its "
                     "result will be shown here once it is made.")


def _cancel_button(key: tuple, what: str, where, place: str) -> None:
    """place: "wait" (in the page's own run) or "follow" (in the refreshing panel): two widgets of one run."""
    where.button("Cancel", key=f"long_job_cancel_{place}_{_slug(key)}", on_click=_cancel, args=(key, what),
                 help="Stop waiting for it: it stops after the part it is in, unless someone else asked for it too.")


def _wait_in_page(key: tuple, what: str) -> Finished | None:
    """Wait in this run, the bar redrawn when the progress moves; a rerun asked for meanwhile (the Cancel button,
    any widget) stops this run at its next look at the session state. Past IN_PAGE_WAIT_S: the refreshing panel."""
    ticket = _tickets()[key]
    if ticket.wait(0.3):
        return _outcome(key)
    holder = st.empty()
    with holder.container():
        left, right = st.columns([6, 1])
        bar = left.empty()
        _cancel_button(key, what, right, "wait")
    shown = None
    deadline = time.monotonic() + IN_PAGE_WAIT_S
    while not ticket.wait(0 if shown is None else 1.0):
        if key not in st.session_state.get("long_job_tickets", {}):  # also where a rerun asked for stops this run
            return None
        now = progress_line(ticket, what)
        if now != shown:  # a room of browsers redrawing every second costs the model real CPU
            bar.progress(now[0], text=now[1])
            shown = now
        if time.monotonic() > deadline:
            holder.empty()
            _follow(key, what)
            return None
    holder.empty()
    return _outcome(key)


@st.fragment(run_every=REFRESH_S)
def _follow(key: tuple, what: str) -> None:
    """The progress of a job this session waits for, refreshed on its own; the whole page is drawn again once it
    is done (or no longer waited for)."""
    ticket = _tickets().get(key)
    if ticket is None or ticket.done():
        st.rerun(scope="app")
    left, right = st.columns([6, 1])
    fraction, line = progress_line(ticket, what)
    left.progress(fraction, text=line)
    _cancel_button(key, what, right, "follow")


def _slug(key: tuple) -> str:
    """A widget key for a job's Cancel button (the job's key can be long: a hash of it)."""
    import hashlib

    return hashlib.sha256(repr(key).encode()).hexdigest()[:16]
