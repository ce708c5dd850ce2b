"""Prefill & decode: what the machine pays for a run. This machine's ceilings, the run's prefill and decode
steps on the roofline, batching measured, temperature 0 under batching, and the room's four metrics."""
import time

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.costs import ceilings as ceiling_store
from pipeline.costs.metrics import room_metrics, room_metrics_by_path
from pipeline.costs.named_time import CAPTURED, MEANS, PATH_NAMES, captured_prefill, shown
from pipeline.costs.pass_costs import decode_cost, prefill_cost
from pipeline.costs.regimes import above_a_ceiling, operations_sentence, regime_sentence
from pipeline.costs.roofline import FAR_UNDER, PREFILL_LENGTHS, prefill_curve, trace_points
from pipeline.costs.sweep import batch_sizes, bend, impossible_falls, sweep_steps
from pipeline.run.record import Trace
from pipeline.server.run_queue import DECODE_STEP_COST
from pipeline.text.token_names import token_text
from ui.escape import markdown_text
from ui.plots import log_axis
from ui.words import plural
from views.chrome.frame import page_header, stage_link
from views.chrome.navigation import back_next
from views.links.url_state import keep_offered
from views.pages.prefill_decode.roofline_plain import plain_passes
from views.pages.prefill_decode.room_schedule import room_schedule
from views.pages.prefill_decode.temperature_zero_runs import temperature_zero_runs
from views.request.runs import run_for_page
from views.request.session import current_request, request_key
from views.server.long_job import long_job, made_line
from views.server.state import get_model, run_store
from views.server.waiting import result_through_queue, waiting_time

page_header("Prefill & decode", "Two phases, two limits. Prefill pushes the whole prompt through the model in one "
                                "pass: lots of arithmetic for each weight it reads. Decode pushes one token per pass: "
                                "every weight is read again for a handful of multiplications. Here both are measured "
                                "on this machine and placed against what it can do at most.")
lm = get_model()
trace = run_for_page()
m = trace.dims
SWEEP_STEPS, SWEEP_REPEATS = 6, 2  # decode steps timed per batch, interleaved repeats
DET_STEPS = 12


def gflops(x: float) -> str:
    return f"{x / 1e9:,.2f} GFLOP/s"


def gbs(x: float) -> str:
    return f"{x / 1e9:,.2f} GB/s"


# ---- 1. the ceilings --------------------------------------------------------------------------------------------
st.subheader("1. This machine's two ceilings")
st.markdown("A pass can be slowed by two things: the arithmetic units (how many multiply-adds per second) or the "
            "memory (how many bytes per second reach them). Both are measured here: matrix multiplies at this "
            "model's own shapes, and a copy of a tensor far larger than any cache.")
roof = ceiling_store.cached(m, m.device)  # measured before on this device (the cache folder), or None
if st.button("Measure the ceilings again" if roof else "Measure the ceilings (about 10 s)", key="pd_ceilings"):
    st.session_state["pd_ceilings_asked"] = time.time()  # a new measurement, not one another session made
asked_at = st.session_state.get("pd_ceilings_asked")
if asked_at:
    measure = lambda: ceiling_store.ceilings(get_model().dims, get_model().dims.device, refresh=True)  # noqa: E731
    roof = result_through_queue(("ceilings", asked_at), measure, cost=3000)
if roof is None:
    st.info("Not measured on this machine yet. Press the button: the room's requests wait about 10 s meanwhile. "
            "Until then the passes below show their FLOPs, bytes and times, without the shares of each ceiling.")
else:
    c1, c2, c3 = st.columns(3)
    c1.metric("Compute ceiling", gflops(roof.flops_per_s), help="the fastest of the matrix multiplies below (medians)")
    c2.metric("Memory ceiling", gbs(roof.bytes_per_s), help=f"{roof.copy.name}: bytes read and written per second")
    c3.metric("Balance point", f"{roof.balance:,.0f} FLOPs per byte",
              help="a pass doing fewer FLOPs per byte than this is held back by memory, more: by arithmetic")
    st.dataframe(pd.DataFrame([{"measured": x.name, "median": (gflops if i < len(roof.matmuls) else gbs)(x.median),
                                "range": f"{x.low / 1e9:,.2f} – {x.high / 1e9:,.2f}"}
                               for i, x in enumerate(roof.matmuls + [roof.copy])]), hide_index=True, width="stretch")
    st.caption(f"Measured on {markdown_text(roof.device)}, median of {roof.repeats} repeats each; kept in the cache "
               "folder and reused until measured again. The machine is shared, so the ranges are wide.")


def shares(p) -> dict:
    """A placed pass's shares of the two ceilings and the verdict they give (blank until measured)."""
    if roof is None:
        return {}
    return {"verdict (measured)": p.verdict(roof), "share of compute": f"{p.compute_share(roof):.0%}",
            "share of memory": f"{p.memory_share(roof):.0%}"}


# ---- 2. the run on the roofline ---------------------------------------------------------------------------------
st.subheader("2. Your run on the roofline")
prefill, steps = trace_points(trace)
st.markdown(
    f"FLOPs and bytes of each pass come from the model's dimensions: every weight is read once per pass "
    f"({prefill.cost.bytes_weights / 1e6:,.0f} MB), the KV cache is read and the new positions written, and attention "
    f"multiplies every query by every key it is given (the T² term at prefill). Two paths are timed, and each is "
    f"named: the **captured run** this page shows (recording hooks on every layer: prefill "
    f"{captured_prefill(trace).shown}, {plural(len(steps), 'decode step')}, each one pass plus choosing the token), "
    "and the **plain serving path** (no captures), measured on request.")
plain = plain_passes(current_request(), len(trace.ids))
captured_mid = [steps[len(steps) // 2]] if steps else []
captured = [prefill, *steps]
plain_points_ = [plain.prefill, plain.decode] if plain else []
fixed = plain.fixed if plain else None
fixed_ops = plain.fixed_operations if plain else None
fig = go.Figure()
drawn = [prefill, *steps, *plain_points_] + ([fixed] if fixed else [])
if roof is not None:
    x_lo = min(p.cost.intensity for p in drawn) / 3
    x_hi = max(prefill.cost.intensity * 3, roof.balance * 3)
    xs = [x_lo * (x_hi / x_lo) ** (i / 60) for i in range(61)]
    fig.add_trace(go.Scatter(x=xs, y=[roof.roof(x) / 1e9 for x in xs], mode="lines", name="ceiling (roofline)",
                             line=dict(color="black")))
    fig.add_trace(go.Scatter(x=xs, y=[FAR_UNDER * roof.roof(x) / 1e9 for x in xs], mode="lines",
                             name=f"{FAR_UNDER:.0%} of the ceiling: below, overhead-bound",
                             line=dict(color="grey", dash="dot")))
for name, pts, symbol in ((f"decode steps, {PATH_NAMES[CAPTURED]}", steps, "circle"),
                          (f"prefill, {PATH_NAMES[CAPTURED]}", [prefill], "diamond"),
                          ("plain path (prefill, decode step)", plain_points_, "star"),
                          ("1-token pass, nothing cached", [fixed] if fixed else [], "x")):
    if pts:
        fig.add_trace(go.Scatter(x=[p.cost.intensity for p in pts], y=[p.flops_per_s / 1e9 for p in pts],
                                 mode="markers", name=name, text=[p.label for p in pts],
                                 marker=dict(size=9 if symbol == "circle" else 14, symbol=symbol),
                                 hovertemplate="%{text}<br>%{x:.2f} FLOPs/byte<br>%{y:.2f} GFLOP/s<extra></extra>"))
xs_drawn = [x for tr in fig.data for x in tr.x]
ys_drawn = [y for tr in fig.data for y in tr.y]
fig.update_layout(height=400, margin=dict(l=10, r=10, t=10, b=10), font=dict(size=13),
                  xaxis=log_axis(xs_drawn, "arithmetic intensity (FLOPs per byte moved)"),
                  yaxis=log_axis(ys_drawn, "achieved GFLOP/s"))
st.plotly_chart(fig, width="stretch")
rows = [prefill, *captured_mid, *plain_points_] + ([fixed] if fixed else [])
if roof is not None:  # two tables, each whole in the page's width: in one of nine columns the last ones were cut
    st.dataframe(pd.DataFrame([{"pass": p.label, **shares(p)} for p in rows]), hide_index=True, width="stretch")
st.dataframe(pd.DataFrame([{
    "pass": p.label, "FLOPs": f"{p.cost.flops / 1e6:,.0f} M", "bytes": f"{p.cost.bytes / 1e6:,.0f} MB",
    "FLOPs per byte": f"{p.cost.intensity:,.1f}", "time": f"{p.seconds * 1e3:,.1f} ms",
    "GFLOP/s": f"{p.flops_per_s / 1e9:,.2f}", "GB/s": f"{p.bytes_per_s / 1e9:,.2f}"} for p in rows]),
             hide_index=True, width="stretch")
st.caption("GFLOP/s and GB/s: what each pass achieved, its FLOPs and bytes over its time.")
if roof is not None:
    hooks = "recording every layer's tensors, with eager attention"
    st.markdown("\n".join(f"- {markdown_text(regime_sentence(p, roof, fixed, hooks if p in captured else ''))}"
                           for p in rows if p is not fixed))
    if fixed is not None and fixed_ops:
        st.markdown(markdown_text(operations_sentence(fixed, fixed_ops, m.L, roof)))
    if above_a_ceiling(rows, roof):
        st.warning("A pass here ran faster than a ceiling allows: the ceilings were measured at a busier moment of "
                   "this shared machine. Measure them again (section 1) before reading the shares.")
    st.caption(f"Three regimes: a pass using a larger share of the memory ceiling than of compute is memory-bound, "
               f"the other way compute-bound; under {FAR_UNDER:.0%} of both, neither holds it: it is overhead-bound, "
               "and its time follows the number of small operations (layers, hooks), not its bytes. That is why a "
               "model with fewer layers can take less time per step while reading more bytes. The decode steps do "
               f"{steps[0].cost.intensity if steps else decode_cost(m, len(trace.ids)).intensity:.2f} FLOPs per byte, "
               f"far left of the balance point ({roof.balance:,.0f}); the prefill pass "
               f"{prefill.cost.intensity:,.0f}: each weight read serves all {plural(len(trace.ids), 'prompt token')}.")
if plain:
    at = time.strftime('%H:%M', time.localtime(plain.measured_at))
    st.caption(f"Plain path measured at {at}: its prefill is timed by its TTFT (the pass, the tokenizing and the "
               "first choice) and its decode step by its TPOT, medians of 3 answers; the 1-token pass is the model's "
               "forward without captures, median of 7.")

st.markdown("**Prefill throughput against prompt length** (one pass without recording, lengths interleaved):")
if st.button(f"Measure prefill at {', '.join(map(str, PREFILL_LENGTHS))} tokens", key="pd_prefill"):
    st.session_state["pd_prefill_asked"] = True
if st.session_state.get("pd_prefill_asked"):
    curve = result_through_queue(("prefill curve", PREFILL_LENGTHS),
                                 lambda: prefill_curve(get_model(), PREFILL_LENGTHS), cost=3 * sum(PREFILL_LENGTHS))
    st.dataframe(pd.DataFrame([{"prompt tokens": T, "time (median)": f"{p.seconds * 1e3:,.0f} ms",
                                "range": f"{r[0] * 1e3:,.0f} – {r[1] * 1e3:,.0f} ms",
                                "tokens/s": f"{T / p.seconds:,.0f}", "achieved": gflops(p.flops_per_s)}
                               for T, p, r in curve]), hide_index=True, width="stretch")
    if roof is not None:  # apart, as the passes' table above: eight columns did not fit the page
        st.dataframe(pd.DataFrame([{"prompt tokens": T, **shares(p)} for T, p, _ in curve]), hide_index=True,
                     width="stretch")
    st.caption("More tokens per pass share the same read of the weights, so tokens per second rises with the "
               "prompt until the arithmetic units are full. Measured once per server and kept.")

# ---- 3. batching --------------------------------------------------------------------------------------------------
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


st.subheader("3. Batching, live")
st.markdown("Since decode rereads every weight for one token, servers move many users forward with that one read: "
            "B requests in the same pass. It raises the total tokens per second, and slows each user a little.")
offered = batch_sizes(lm.dims.device)  # where the sweep runs (not where the run was made): 32 on a CPU, 512 on a GPU
keep_offered("pd_sizes", offered)
sizes = tuple(st.multiselect("Batch sizes", offered, default=list(offered), key="pd_sizes")) or (1,)
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
    took = f"at least {waiting_time(SWEEP_REPEATS * SWEEP_STEPS * len(sizes) * step_s)} here (more with the ceilings)"
st.caption(f"{SWEEP_STEPS} greedy decode steps per batch size, {SWEEP_REPEATS} interleaved repeats: {took}. It runs "
           "a batch size at a time behind the room's questions (each point's steps are timed inside its turn). "
           "Measured once per server for each choice of sizes, and kept for everyone.")
clicked = st.button("Run the batching sweep", key="pd_sweep")
if clicked:
    st.session_state["pd_sweep_sizes"] = sizes
asked_sizes = st.session_state.get("pd_sweep_sizes") or sizes  # the sizes this session asked for, else its pick
measured = long_job(("batch sweep", asked_sizes),
                    lambda: sweep_steps(lm, asked_sizes, SWEEP_STEPS, SWEEP_REPEATS, roof),
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
    first = pts[0]
    st.markdown(
        f"At B = {first.batch_size}: {first.tokens_per_s:,.1f} tokens/s, {first.ms_per_token_per_user:,.0f} ms "
        f"per token. " + (f"At B = {pts[-1].batch_size}: {pts[-1].tokens_per_s:,.1f} tokens/s in all, "
                          f"{pts[-1].ms_per_token_per_user:,.0f} ms per token for each user. " if len(pts) > 1 else "")
        + (f"The curve bends at **B = {knee.batch_size}**: from there on, no doubling of the batch buys 1.5× the "
           "tokens per second of the size just before it. " if knee else
           "Over these sizes tokens per second kept growing: a doubling still bought 1.5× the size before it. ")
        + f"Why: one step reads the {prefill.cost.bytes_weights / 1e6:,.0f} MB of weights once whatever B is, "
          "while its FLOPs grow with B. Once B rows of arithmetic take longer than the read, every extra user "
          "adds time in proportion."
        + (f" The roofline puts that point near B = {max(1, round(roof.balance / steps[0].cost.intensity)):,}; on a "
           "CPU, the rows' activations also spill out of the caches earlier." if roof and steps else ""))
    for fall in impossible_falls(pts):
        st.info(fall_sentence(fall))
    st.caption("Each point: the median over repeats of each repeat's median step; error bars: the range. "
               "Sizes are measured in turn, then in reverse order, so the machine's load hits them alike. "
               + made_line(measured))

# ---- 4. temperature 0 under batching -------------------------------------------------------------------------------
st.subheader("4. Temperature 0 under batching")
st.markdown("Greedy decoding always takes the top token, so one request should always get the same answer. But "
            "inside a batch its row is computed by other kernels: a matrix multiply over more rows may add its "
            "products in another order, and the padded row's attention runs over a longer, masked key axis. "
            "Floating-point addition is not associative, so the logits can move by a hair, and a near-tie can flip.")
others = st.slider("Other requests in the batch", 1, 31, 7, key="pd_others")
if st.button("Compare alone vs in the batch", key="pd_det"):
    st.session_state["pd_det_n"] = others
asked_n = st.session_state.get("pd_det_n")
if asked_n:
    from pipeline.costs.determinism import determinism

    det = result_through_queue(("determinism", asked_n, DET_STEPS),
                               lambda: determinism(get_model(), asked_n, DET_STEPS),
                               cost=2 * (asked_n + 1) * (n_prompt + DET_STEPS * DECODE_STEP_COST))
    c1, c2, c3 = st.columns(3)
    c1.metric("Largest logit difference", f"{det.max_abs_logit_diff:.2g}")
    c2.metric("Steps where the choice flips", f"{len(det.flips)} of {len(det.per_step)}")
    c3.metric("Answers part at", "never" if det.parted_at is None else f"step {det.parted_at}")
    fig = go.Figure(go.Bar(x=list(range(len(det.per_step))), y=[max(d, 1e-12) for d in det.per_step]))
    fig.update_layout(height=260, margin=dict(l=10, r=10, t=10, b=10), yaxis=dict(type="log", title="max |Δ logit|"),
                      xaxis_title="decode step")
    st.plotly_chart(fig, width="stretch")
    if det.flips:
        names = lambda t: token_text(lm.tokenizer, t)  # noqa: E731 - readable text; a table cell shows it literally
        st.dataframe(pd.DataFrame([{"step": f.step, "alone": names(f.alone_token), "in the batch": names(f.batch_token),
                                    "lead alone": f"{f.gap_alone:.2g}", "lead in the batch": f"{f.gap_batch:.2g}"}
                                   for f in det.flips]), hide_index=True)
    st.markdown(f"The request's row was padded by {plural(det.padding, 'position')} inside a batch of "
                f"{det.batch_size}; it was fed the alone run's tokens, so every step compares the same question. "
                + ("No chosen token flipped: every step's lead was larger than the noise." if not det.flips else
                   "Each flip came where the alone run's lead over the runner-up was within the noise."))
    if m.device.startswith("cuda"):
        st.caption("On this GPU the batched pass uses cuBLAS matrix multiplies whose split of the inner sum depends on "
                   "the number of rows, and fused attention kernels: they are not batch-invariant by default, which "
                   "is what the difference above measures.")
    else:
        st.caption("Measured on a CPU. On a GPU the same check tells whether the kernels in use are batch-invariant: "
                   "the matrix multiplies (cuBLAS picks a different split of the inner sum by batch size) and the "
                   "attention kernel (flash attention splits by sequence length). Batch-invariant kernels give a "
                   "difference of exactly 0 at every step.")
temperature_zero_runs(lm)

# ---- 5. the room ---------------------------------------------------------------------------------------------------
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
                   help="output tokens per second of the model's time (a run decoded in a batch of B: 1/B of its time)")
st.caption("The first two are what a user feels; throughput is what the machine's owner pays for. A bigger batch "
           "raises throughput and TPOT together (section 3). A request the queue served shows the same times in "
           "the schedule below: one measurement, on the queue's clock.")

# ---- 6. the room's schedule ----------------------------------------------------------------------------------------
st.subheader("6. The room's schedule: continuous batching")
room_schedule(request_key(current_request()))
stage_link("views/pages/kv_cache.py", "The KV cache that decode reads at every step", "🗄️")
back_next()
