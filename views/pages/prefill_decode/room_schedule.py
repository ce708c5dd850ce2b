"""The room's real schedule: which requests the model's running batch held at each moment, when each
joined and left, and each one's TTFT and TPOT (bars are anonymous; the learner's own is highlighted)."""
from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from pipeline.costs.named_time import shown
from pipeline.server.room_schedule import first_view_start, room_rows
from ui.escape import markdown_text
from ui.words import plural
from views.server.state import run_queue

OWN, OTHER, WAIT, PREFILL = "#f97316", "#0ea5e9", "#e5e7eb", "#a78bfa"


def room_schedule(request_key_of_this_learner) -> None:
    """Draw the queue's recent schedule, the learner's own request (queue key) highlighted."""
    data = room_rows(run_queue().schedule(), request_key_of_this_learner)
    rows = data["rows"]
    st.markdown("The model serves the whole room through one queue. Chat requests are scheduled **per decode "
                "step**: a new request's prompt is prefilled between two steps, then it joins the running batch "
                "and every step makes one token for each request in it. A request leaves at its own last token; "
                "it does not wait for the others. A request also waits in line while the memory set aside for "
                "KV caches is full.")
    if not rows:
        st.caption("No chat request has gone through the running batch since the server started (a run already "
                   "stored is served without the model).")
        return
    fig = go.Figure()
    for kind, color, start, end in (("waiting", WAIT, "queued_s", "prefill_at_s"),
                                    ("prefill", PREFILL, "prefill_at_s", "decoding_from_s")):
        fig.add_trace(go.Bar(y=[r["label"] for r in rows], x=[r[end] - r[start] for r in rows],
                             base=[r[start] for r in rows], orientation="h", name=kind, marker_color=color,
                             hoverinfo="x+name"))
    for own in (False, True):
        picked = [r for r in rows if r["own"] == own and r["left_s"] is not None]
        fig.add_trace(go.Bar(y=[r["label"] for r in picked], x=[r["left_s"] - r["decoding_from_s"] for r in picked],
                             base=[r["decoding_from_s"] for r in picked], orientation="h",
                             name="your decode steps" if own else "decode steps (in the batch)",
                             marker_color=OWN if own else OTHER,
                             hovertext=[f"{plural(r['tokens'], 'token')}; {r['ttft_label']} {shown(r['ttft_s'])}"
                                        + (f", {r['tpot_label']} {shown(r['tpot_s'])}" if r["tpot_s"] else "")
                                        for r in picked], hoverinfo="text"))
    end = max([r["left_s"] or r["decoding_from_s"] for r in rows] + [s["t_s"] for s in data["steps"]])
    start = first_view_start(rows, end)  # a long record opens on its latest requests, not on 1-pixel lines
    window = [start - 0.02 * (end - start), end + 0.02 * (end - start)]
    fig.update_layout(barmode="overlay", height=150 + 18 * len(rows), margin=dict(l=10, r=10, t=40, b=10),
                      xaxis=dict(title="seconds since the first request shown arrived", range=window),
                      yaxis=dict(autorange="reversed", title=""),
                      legend=dict(orientation="h", y=1.02, yanchor="bottom"))
    st.plotly_chart(fig, width="stretch")
    if start > 0:
        later = sum(r["queued_s"] >= start for r in rows)
        st.caption(f"The chart opens on the last {plural(later, 'request')}, from {start:,.0f} s of {end:,.0f} s: "
                   f"over the whole record they would be lines a pixel wide. Double-click it to see all "
                   f"{len(rows)}.")
    if data["steps"]:
        sizes = go.Figure(go.Scatter(x=[s["t_s"] for s in data["steps"]], y=[s["size"] for s in data["steps"]],
                                     mode="lines", line_shape="hv", line_color=OTHER))
        sizes.update_layout(height=200, margin=dict(l=10, r=10, t=30, b=10),
                            title="Requests in the batch, step by step",
                            xaxis=dict(title="seconds (the same clock)", range=window),
                            yaxis=dict(title="batch size", rangemode="tozero", dtick=max(1, len(rows) // 8)))
        st.plotly_chart(sizes, width="stretch")
    own = data["own"]
    mine = ("Your request is not among them: its run was stored before, or ran before the record's window."
            if own is None else f"Yours waited {own['prefill_at_s'] - own['queued_s']:.2f} s in line, spent "
            f"{own['prefill_s']:.2f} s in its prefill step (the model's pass and what the step records around it), "
            f"then {own['ttft_label']} {shown(own['ttft_s'] or 0)}"
            + (f" and {own['tpot_label']} {shown(own['tpot_s'])}." if own["tpot_s"] else "."))
    st.caption(f"Across the {plural(len(rows), 'request')} shown: " + served_medians(data["groups"]) + " " + mine
               + " TTFT counts from arrival in the queue (loading the model comes before and is not in it); TPOT is "
               "the mean time between two of a request's tokens, which grows with the batch: each step does the "
               "work of every request in it. Each request's stored run records these same times.")


def served_medians(groups: list[dict]) -> str:
    """The medians of each model and way of serving, named by its model, paths and device; never one median over
    several."""
    if not groups:
        return "none has finished yet."
    parts = [(f"{markdown_text(g['model'])}: " if g.get("model") else "")
             + f"median {g['ttft_label']} " + ("—" if g["ttft_s"] is None else shown(g["ttft_s"]))
             + f", {g['tpot_label']} " + ("—" if g["tpot_s"] is None else shown(g["tpot_s"]))
             + (f" on {g['device']}" if g["device"] else "")
             + (f" ({plural(g['requests'], 'request')})" if len(groups) > 1 else "") for g in groups]
    kept_apart = "times of different models and paths are kept apart: " if len(groups) > 1 else ""
    return kept_apart + "; ".join(parts) + "."
