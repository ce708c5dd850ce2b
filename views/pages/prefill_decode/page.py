"""Prefill & decode: what the machine pays for a run. This machine's ceilings, the run's prefill and decode
steps on the roofline, batching measured, temperature 0 under batching, and the room's four metrics."""
import time

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.costs import ceilings as ceiling_store
from pipeline.costs.named_time import CAPTURED, PATH_NAMES, captured_prefill
from pipeline.costs.pass_costs import decode_cost
from pipeline.costs.regimes import above_a_ceiling, operations_sentence, regime_sentence
from pipeline.costs.roofline import FAR_UNDER, PREFILL_LENGTHS, prefill_curve, trace_points
from ui.escape import markdown_text
from ui.plots import log_axis
from ui.words import plural
from views.chrome.frame import page_header, stage_link
from views.chrome.navigation import back_next
from views.pages.prefill_decode.batching import batching
from views.pages.prefill_decode.determinism import batch_determinism
from views.pages.prefill_decode.roofline_plain import plain_passes
from views.pages.prefill_decode.room_numbers import room_numbers
from views.pages.prefill_decode.room_schedule import room_schedule
from views.pages.prefill_decode.temperature_zero_runs import temperature_zero_runs
from views.request.runs import run_for_page
from views.request.session import current_request, request_key
from views.server.state import get_model
from views.server.waiting import result_through_queue

page_header("Prefill & decode", "Two phases, two limits. Prefill pushes the whole prompt through the model in one "
                                "pass: lots of arithmetic for each weight it reads. Decode pushes one token per pass: "
                                "every weight is read again for a handful of multiplications. Here both are measured "
                                "on this machine and placed against what it can do at most.")
lm = get_model()
trace = run_for_page()
m = trace.dims


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

batching(lm, trace, prefill, steps, roof)

# ---- 4. temperature 0 under batching -------------------------------------------------------------------------------
batch_determinism(lm, len(trace.ids), m.device)
temperature_zero_runs(lm)

# ---- 5. the room ---------------------------------------------------------------------------------------------------
room_numbers()

# ---- 6. the room's schedule ----------------------------------------------------------------------------------------
st.subheader("6. The room's schedule: continuous batching")
room_schedule(request_key(current_request()))
stage_link("views/pages/kv_cache/page.py", "The KV cache that decode reads at every step", "🗄️")
back_next()
