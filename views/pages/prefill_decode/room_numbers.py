"""Prefill & decode, section 5: the room's four numbers (TTFT, TPOT, end to end, throughput) over the finished runs
this server holds, one row per model and way of serving (pipeline/costs/metrics.py)."""
from __future__ import annotations

import streamlit as st

from pipeline.costs.metrics import room_metrics, room_metrics_by_path
from pipeline.costs.named_time import MEANS, shown
from pipeline.run.record import Trace
from ui.escape import markdown_text
from ui.words import plural
from views.server.state import run_store


def room_numbers() -> None:
    st.subheader("5. The room now: four numbers")
    traces = [t for t in run_store().values() if isinstance(t, Trace)]
    groups = room_metrics_by_path(traces)
    st.markdown(f"From the {plural(len(traces), 'finished run')} this server holds in memory (medians; the 95th "
                "percentile below each). Each time is named by the path that ran it: its prompt's pass (TTFT) and its "
                "decode steps (TPOT). Times of different models or paths are never pooled"
                + (", so each model and way of serving has its own row." if len(groups) > 1 else "."))
    for group in groups or [{"ttft_label": "TTFT", "tpot_label": "TPOT", "device": None, "model": None,
                             "metrics": room_metrics([])}]:
        room = group["metrics"]
        if len(groups) > 1:
            st.caption(f"{plural(room.runs, 'run')} of {markdown_text(group['model'])} served this way"
                       + (f" on {group['device']}" if group["device"] else ""))
        cols = st.columns(4)
        for col, label, s, what in zip(cols, (group["ttft_label"], group["tpot_label"], "End to end"),
                                       (room.ttft_s, room.tpot_s, room.e2e_s),
                                       (MEANS["TTFT"] + ".", MEANS["TPOT"] + ".", "Arrival to the last token.")):
            col.metric(label, "—" if s is None else shown(s.p50), help=what)
            if s is not None:
                col.caption(f"p95 {shown(s.p95)} over {plural(s.n, 'run')}")
        throughput = room.throughput_tokens_per_s
        # the unit in the label: "15.3 tokens/s" as the value was cut to "15.3 token…" in a quarter of the page
        cols[3].metric("Throughput (tokens/s)", "—" if throughput is None else f"{throughput:,.1f}",
                       help="output tokens per second of the model's time (a run decoded in a batch of B: 1/B of its "
                            "time)")
    st.caption("The first two are what a user feels; throughput is what the machine's owner pays for. A bigger batch "
               "raises throughput and TPOT together (section 3). A request the queue served shows the same times in "
               "the schedule below: one measurement, on the queue's clock.")
