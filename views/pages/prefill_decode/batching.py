"""Prefill & decode, section 3: batching, live. Decode steps timed at each batch size picked (pipeline/costs/sweep.py),
a long job behind the room's questions, kept for everyone; total tokens per second against each user's time."""
from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from pipeline.costs.pass_costs import decode_cost, prefill_cost
from pipeline.costs import sweep  # sweep.sweep_steps read when the job starts (a test stands a sweep in for it)
from pipeline.costs.sweep import GPU_BATCH_SIZES, batch_sizes, bend, impossible_falls
from pipeline.model.interface import LanguageModel
from pipeline.run.record import Trace
from views.links.controls import linked
from views.links.params import numbers_from
from views.server.long_job import long_job, made_line
from views.server.waiting import waiting_time

SWEEP_STEPS, SWEEP_REPEATS = 6, 2  # decode steps timed per batch, interleaved repeats


def fall_sentence(fall) -> str:
    """A larger batch measured faster per user than a smaller one, said as the noise it is, with the spread."""
    a, b = fall.before, fall.after
    def ms(p) -> str:
        return f"{p.ms_per_token_per_user:,.0f} ms (range {p.step_range[0] * 1e3:,.0f}–{p.step_range[1] * 1e3:,.0f})"
    said = (f"Each user's time per token fell from B = {a.batch_size} to B = {b.batch_size}: {ms(a)}, then {ms(b)}. "
            f"A step over {b.batch_size} rows does all the work of one over {a.batch_size} and more, so it cannot be "
            "faster for each user: this is the machine's noise. ")
    if fall.within_spread:
        return said + ("The two ranges of repeats overlap: the fall is within what one size moved by from repeat to "
                       "repeat.")
    return said + ("The two ranges do not even overlap: the machine's load changed between these sizes' turns "
                   "(another process, or a room's questions). Run the sweep again at a quieter moment.")


def batching(lm: LanguageModel, trace: Trace, prefill, steps: list, roof) -> None:
    """prefill, steps: the run's points on the roofline (pipeline/costs/roofline.py's trace_points); roof: this
    machine's ceilings, or None before they are measured."""
    m = trace.dims
    st.subheader("3. Batching, live")
    st.markdown("Since decode rereads every weight for one token, servers move many users forward with that one "
                "read: B requests in the same pass. It raises the total tokens per second, and slows each user a "
                "little.")
    offered = batch_sizes(lm.dims.device)  # where the sweep runs (not where the run was made): 32 on a CPU, 512 on
    # a GPU
    # a link's sizes may be any a device offers (made on a GPU server); those this device does not offer are dropped
    sizes = tuple(linked(st.multiselect, "pd_sizes", numbers_from(GPU_BATCH_SIZES), "Batch sizes", offered,
                         default=list(offered), offered=offered)) or (1,)
    step_s = sorted(p.seconds for p in steps)[len(steps) // 2] if steps else trace.timings.prefill_s
    n_prompt = len(trace.ids)
    if roof is not None:  # the roofline's bound per step, scaled to what this run's own steps took
        bound = lambda b: max(decode_cost(m, n_prompt, b).flops / roof.flops_per_s,  # noqa: E731
                              decode_cost(m, n_prompt, b).bytes / roof.bytes_per_s)
        scale = step_s / max(bound(1), 1e-9)
        estimate = SWEEP_REPEATS * sum(scale * (SWEEP_STEPS * bound(b) + prefill_cost(m, b * n_prompt).flops
                                                / roof.flops_per_s) for b in sizes)
        took = f"about {waiting_time(estimate)} here, from your run's own step time and the ceilings"
    else:  # no ceilings: each step takes at least as long as one of this run's own
        least = waiting_time(SWEEP_REPEATS * SWEEP_STEPS * len(sizes) * step_s)
        took = f"at least {least} here (more with the ceilings)"
    st.caption(f"{SWEEP_STEPS} greedy decode steps per batch size, {SWEEP_REPEATS} interleaved repeats: {took}. It "
               "runs a batch size at a time behind the room's questions (each point's steps are timed inside its "
               "turn). Measured once per server for each choice of sizes, and kept for everyone.")
    clicked = st.button("Run the batching sweep", key="pd_sweep")
    if clicked:
        st.session_state["pd_sweep_sizes"] = sizes
    asked_sizes = st.session_state.get("pd_sweep_sizes") or sizes  # the sizes this session asked for, else its pick
    measured = long_job(("batch sweep", asked_sizes),
                        lambda: sweep.sweep_steps(lm, asked_sizes, SWEEP_STEPS, SWEEP_REPEATS, roof),
                        "the batching sweep", start=clicked)
    if measured is not None:
        pts = measured.value
        fig = go.Figure()
        fig.add_trace(go.Scatter(x=[p.batch_size for p in pts], y=[p.tokens_per_s for p in pts], mode="lines+markers",
                                 name="total tokens/s", error_y=dict(type="data", symmetric=False,
                                 array=[p.batch_size / p.step_range[0] - p.tokens_per_s for p in pts],
                                 arrayminus=[p.tokens_per_s - p.batch_size / p.step_range[1] for p in pts])))
        fig.add_trace(go.Scatter(x=[p.batch_size for p in pts], y=[p.ms_per_token_per_user for p in pts],
                                 mode="lines+markers", name="ms per token, each user", yaxis="y2"))
        fig.update_layout(height=360, margin=dict(l=10, r=10, t=10, b=10), font=dict(size=13),
                          xaxis=dict(type="log", title="B, requests decoded together", tickvals=list(asked_sizes)),
                          yaxis=dict(title="total tokens/s"),
                          yaxis2=dict(title="ms per token, each user", overlaying="y", side="right", tickformat=",.0f"),
                          legend=dict(orientation="h", y=1.12))
        st.plotly_chart(fig, width="stretch")
        knee = bend(pts)
        first, last = pts[0], pts[-1]
        st.markdown(
            f"At B = {first.batch_size}: {first.tokens_per_s:,.1f} tokens/s, {first.ms_per_token_per_user:,.0f} ms "
            f"per token. " + (f"At B = {last.batch_size}: {last.tokens_per_s:,.1f} tokens/s in all, "
                              f"{last.ms_per_token_per_user:,.0f} ms per token for each user. " if len(pts) > 1 else "")
            + (f"The curve bends at **B = {knee.batch_size}**: from there on, no doubling of the batch buys 1.5× the "
               "tokens per second of the size just before it. " if knee else
               "Over these sizes tokens per second kept growing: a doubling still bought 1.5× the size before it. ")
            + f"Why: one step reads the {prefill.cost.bytes_weights / 1e6:,.0f} MB of weights once whatever B is, "
              "while its FLOPs grow with B. Once B rows of arithmetic take longer than the read, every extra user "
              "adds time in proportion."
            + (f" The roofline puts that point near B = {max(1, round(roof.balance / steps[0].cost.intensity)):,}; "
               "on a CPU, the rows' activations also spill out of the caches earlier." if roof and steps else ""))
        for fall in impossible_falls(pts):
            st.info(fall_sentence(fall))
        st.caption("Each point: the median over repeats of each repeat's median step; error bars: the range. "
                   "Sizes are measured in turn, then in reverse order, so the machine's load hits them alike. "
                   + made_line(measured))
