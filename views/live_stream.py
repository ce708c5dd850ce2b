"""The answer streamed live, token by token, as the model produces it (not a replay).

It runs on the plain serving path (pipeline.stages.fast_path: no hooks, same tokens) through the
model's queue; the page shows the text growing with TTFT and TPOT counting up, then puts the plain
path's speed beside the captured run's for the same request.
"""
from __future__ import annotations

import threading
import time

import streamlit as st

from pipeline.run_queue import cost_of
from pipeline.stages.fast_path import stream
from views.common import APP_MAX_PROMPT_TOKENS, get_model, run_queue


class LiveAnswer:
    """Events pushed by the worker thread, read by the page."""

    def __init__(self):
        self.events: list[dict] = []
        self.lock = threading.Lock()

    def push(self, event: dict) -> None:
        with self.lock:
            self.events.append(event)

    def snapshot(self) -> list[dict]:
        with self.lock:
            return list(self.events)


def stream_live(request, captured_tpot_s: float | None) -> dict | None:
    """Queue the request on the plain path and draw its text as it arrives. Returns the summary."""
    live = LiveAnswer()
    work = lambda: list(stream(get_model(), request, APP_MAX_PROMPT_TOKENS, on_event=live.push))  # noqa: E731
    ticket = run_queue().submit(("live", id(live)), work, cost_of(50, request.options.max_new_tokens))
    box, stats = st.empty(), st.empty()
    t0 = time.perf_counter()
    while True:
        done = ticket.wait(0.1)
        events = live.snapshot()
        text = "".join(e.get("delta", "") for e in events)
        deltas = [e for e in events if "delta" in e]
        if not events and not done:
            ahead = ticket.position()
            stats.caption(f"⏳ waiting for the model ({ahead} ahead of you)" if ahead else "⏳ prefill…")
        else:
            first = deltas[0]["t_s"] if deltas else None
            tpot = ((deltas[-1]["t_s"] - first) / max(deltas[-1]["step"], 1)) if len(deltas) > 1 else None
            stats.caption((f"TTFT {first:.2f} s" if first is not None else "TTFT …")
                          + (f" · TPOT {tpot * 1000:.0f} ms" if tpot else "")
                          + f" · {time.perf_counter() - t0:.1f} s since you pressed the button")
        box.code(text or "…", language=None, wrap_lines=True)
        if done:
            break
    ticket.result()  # raises the run's error, if any
    summary = next((e for e in reversed(live.snapshot()) if e.get("done")), None)
    if summary and summary["tpot_s"] and captured_tpot_s:
        st.markdown(f"Same request, two paths: **plain serving {summary['tpot_s'] * 1000:.0f} ms/token**, captured "
                    f"run {captured_tpot_s * 1000:.0f} ms/token (it also records every step's top candidates and "
                    "the cache size). Both choose the same tokens; times come from a shared machine and vary.")
    return summary
