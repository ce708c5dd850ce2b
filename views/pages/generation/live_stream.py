"""The answer streamed live, token by token, as the model produces it (not a replay).

It runs on the plain serving path (pipeline.faster.fast_path: no hooks, same tokens) through the
model's queue; the page shows the text growing with TTFT and TPOT counting up. `compare_paths`
measures the plain path and the captured run for the same request now, interleaved.
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import streamlit as st

from pipeline.costs.named_time import PLAIN, NamedTime, time_label
from pipeline.server.run_queue import cost_of
from pipeline.stages.decode_record import EventKind, StreamEvent
from ui.words import plural
from views.request.session import request_key
from views.server.state import APP_MAX_PROMPT_TOKENS, get_model, run_queue
from views.server.waiting import result_through_queue

if TYPE_CHECKING:  # torch: imported when a stream starts, not with the page
    from pipeline.stages.generation import Answer


class LiveAnswer:
    """Events pushed by the worker thread, read by the page."""

    def __init__(self):
        self.events: list[StreamEvent] = []
        self.lock = threading.Lock()

    def push(self, event: StreamEvent) -> None:
        with self.lock:
            self.events.append(event)

    def snapshot(self) -> list[StreamEvent]:
        with self.lock:
            return list(self.events)


def prompt_length(request) -> int:
    """The request's prompt in tokens: what the queue costs it by and refuses when long."""
    from pipeline.stages.tokens import tokenize_request

    return len(tokenize_request(get_model().tokenizer, request).ids)


def stream_live(request, recorded_tpot: NamedTime | None) -> Answer:
    """Queue the request on the plain path and draw its text as it arrives. Returns the finished answer.
    recorded_tpot: the stored run's TPOT (pipeline.costs.named_time.tpot), named by its path."""
    from pipeline.faster.fast_path import generate  # torch: imported when a stream starts, not with the page

    live = LiveAnswer()
    work = lambda: generate(get_model(), request, APP_MAX_PROMPT_TOKENS, on_event=live.push)  # noqa: E731
    # the server prices what it admits (its stream engine tokenizes the request): the page only submits
    ticket = run_queue().submit(("live", id(live)), work, batch=("stream", (request, live.push)))
    box, stats = st.empty(), st.empty()
    t0 = time.perf_counter()
    while True:
        done = ticket.wait(0.1)
        events = live.snapshot()
        deltas = [e for e in events if e.kind == EventKind.TEXT_DELTA]
        text = "".join(e.delta for e in deltas)
        if not events and not done:
            ahead = ticket.position()
            stats.caption(f"⏳ waiting for the model ({ahead} ahead of you)" if ahead else "⏳ prefill…")
        else:
            first = deltas[0].t_s if deltas else None
            tpot = ((deltas[-1].t_s - first) / max(deltas[-1].step, 1)) if len(deltas) > 1 else None
            stats.caption((f"{time_label('TTFT', PLAIN)} {first:.2f} s" if first is not None else
                           f"{time_label('TTFT', PLAIN)} …")
                          + (f" · {time_label('TPOT', PLAIN)} {tpot * 1000:.0f} ms" if tpot else "")
                          + f" · {time.perf_counter() - t0:.1f} s since you pressed the button")
        box.code(text or "…", language=None, wrap_lines=True)
        if done:
            break
    answer = ticket.result()  # raises the run's error, if any
    st.caption(f"Prompt positions this stream reused from the server's prefix cache: {answer.reused_positions:,}.")
    if answer.tpot_s and recorded_tpot:
        st.markdown(f"Just now on the plain serving path: **{answer.tpot_s * 1000:.0f} ms/token**. The stored run "
                    f"recorded {recorded_tpot.label} {recorded_tpot.shown} when it ran — at another moment of a shared "
                    "machine (other sessions, your own browser drawing the stream), so the two are not a fair "
                    "comparison: **Compare the two paths now** measures both, interleaved.")
    return answer


def compare_paths(request, steps: int = 16, repeats: int = 3) -> None:
    """Both paths on this request now, interleaved; medians and ranges, a ratio only when they separate."""
    from pipeline.run.compare_paths import compare_with_captured

    n_prompt = prompt_length(request)
    runs = 2 * repeats + 1  # a first plain run checks the answer is long enough, then both paths, interleaved
    result = result_through_queue(("paths", request_key(request), steps, repeats, time.strftime("%Y-%m-%d %H:%M")),
                    lambda: compare_with_captured(get_model(), request, steps, repeats, APP_MAX_PROMPT_TOKENS),
                    cost=cost_of(runs * n_prompt, runs * steps), prompt_tokens=n_prompt)
    c = result["comparison"]
    ms = lambda r: f"{r[0] * 1e3:.0f}–{r[1] * 1e3:.0f}"  # noqa: E731
    cols = st.columns(2)
    cols[0].metric("plain serving path, ms/token", f"{c.a_median * 1e3:.0f}", help=f"range {ms(c.a_range)} ms")
    cols[1].metric("captured run, ms/token", f"{c.b_median * 1e3:.0f}", help=f"range {ms(c.b_range)} ms")
    st.markdown(f"Medians of {plural(c.repeats, 'run')} each, interleaved (plain, captured, plain, …), "
                f"{plural(result['steps'], 'token')} "
                f"per run, measured at {time.strftime('%H:%M:%S', time.localtime(result['measured_at']))} (a click "
                f"within the same minute shows this measurement again): ranges plain {ms(c.a_range)} ms, "
                f"captured {ms(c.b_range)} ms. "
                f"**{c.verdict('The plain path', 'the captured run')}**. "
                + ("Both chose the same tokens. " if result["same_tokens"] else "")
                + how_the_plain_path_decodes(result))


def how_the_plain_path_decodes(result: dict) -> str:
    if not result["own_decoder"]:
        return "This model runs the plain path through Hugging Face's forward pass, without the captures."
    cores = (f" and reads each weight on {result['row_blocks']} cores at once" if result["row_blocks"] > 1 else "")
    return ("The plain path skips every capture and Hugging Face's per-step machinery: it writes each new key and "
            f"value into a cache set aside for the whole answer{cores}.")
