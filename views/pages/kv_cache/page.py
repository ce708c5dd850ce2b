"""KV cache: what it stores, how it grows, what it saves, and what it costs in GPU memory."""
import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.stages import kv_cache
from pipeline.stages.kv_cache import NO_CACHE_MAX_TOKENS, human_bytes
from pipeline.text.pieces import token_pieces
from ui.escape import axis_labels
from ui.plots import step_axis
from ui.words import plural
from views.chrome.frame import page_header
from views.chrome.navigation import back_next
from views.links.controls import linked
from views.links.params import choice, integer
from views.pages.kv_cache.calculator import memory_calculator
from views.request.runs import run_for_page
from views.server.state import get_model
from views.server.waiting import result_through_queue

page_header("KV cache", "Each layer turns every token into a key (K, what it offers to be found by) and a value "
                        "(V, what it hands over). Earlier tokens never change, so their K and V are kept and reused "
                        "instead of being computed again for every new token.")
lm = get_model()
trace = run_for_page()
m = trace.dims
L, Hkv, Dh, bpv = m.L, m.Hkv, m.Dh, m.bytes_per_value
windows = [m.window(i) for i in range(L)]  # (L,) each layer's sliding window, None = full attention
sliding = [i for i, w in enumerate(windows) if w is not None]


REPEATS = (1, 4, 8)  # prompt lengths offered: your prompt, repeated k times


def measure(ids: tuple[int, ...], n_steps: int) -> dict:
    return result_through_queue(("kv on/off", ids, n_steps), lambda: kv_cache.compare(get_model(), list(ids), n_steps),
                  cost=len(ids) * n_steps * 3)


st.subheader("1. How the cache grows")
n_prompt = len(trace.tokens)
held_text = f"all {n_prompt:,} prompt tokens"
if sliding and n_prompt > m.sliding_window - 1:
    held_text += (f" in its {L - len(sliding)} full layers, and only the last {m.sliding_window - 1:,} in its "
                  f"{len(sliding)} sliding-window layers (see *Per layer* below)")
st.markdown(f"After prefill the cache holds {held_text}. Each decode step adds one more "
            f"token to every one of the {L} layers. Per token and layer it stores {plural(Hkv, 'key head')} and "
            f"{plural(Hkv, 'value head')} of {Dh} numbers, each {bpv} bytes ({m.dtype}).")
answer = token_pieces(lm.tokenizer, trace.generated_token_ids)  # '토 (1/3)' for part of a character
steps = pd.DataFrame([{"step": s.step, "token": q.label, "tokens in cache": s.kv_cache_tokens,
                       "bytes": s.kv_cache_bytes} for s, q in zip(trace.steps, answer)])
per_token = m.kv_bytes(1)
c1, c2, c3 = st.columns(3)
c1.metric("Bytes per token (all layers)", f"{per_token:,}", help=f"2 (K and V) × {L} L × {Hkv} Hkv × {Dh} Dh × {bpv} B")
c2.metric("Cache after prefill", human_bytes(sum(trace.prefill.kv_bytes_per_layer)))
c3.metric("Cache when the answer ended", human_bytes(trace.cleanup.kv_bytes_released),
          help=f"{plural(trace.cleanup.kv_tokens_released, 'token')}: the prompt and every chosen token but the "
               "last, which is never fed back; freed once the request completed")
labels = axis_labels(list(steps["token"]))
fig = go.Figure(go.Scatter(x=labels, y=steps["bytes"], mode="lines+markers", name="measured bytes",
                           customdata=steps["tokens in cache"],
                           hovertemplate="%{x}<br>%{customdata} tokens<br>%{y:,} B"))
fig.add_trace(go.Scatter(x=labels, y=[sum(kv_cache.held_bytes(m, n)) for n in steps["tokens in cache"]],
                         mode="lines", line_dash="dot",
                         name="formula 2·L·Hkv·Dh·T·bytes" if not sliding else
                         f"formula: Σ over layers 2·Hkv·Dh·bytes × positions held (T, or {m.sliding_window - 1} "
                         "in a sliding layer)"))
fig.update_layout(height=360, margin=dict(l=10, r=10, t=40, b=10), yaxis_title="cache bytes (all L layers)",
                  font=dict(size=13), legend=dict(orientation="h", y=1.02, yanchor="bottom"))  # not beside the plot
step_axis(fig, "x", labels, title="decode step (token being chosen)")
st.plotly_chart(fig, width="stretch")

per_layer = np.array([s.kv_bytes_per_layer for s in trace.steps])  # (S, L)
if (per_layer == per_layer[:, :1]).all():
    st.markdown("The dotted formula line lies exactly on the measured bytes. Every layer keeps its own cache; here all "
                "layers hold the same number of positions, so every row of the measured bytes per layer is the same:")
else:
    st.markdown("The dotted formula line lies exactly on the measured bytes. Every layer keeps its own cache, and "
                "here they differ: a sliding-window layer stops growing at its window while a full layer keeps "
                "every position:")
layer_names = [f"layer {i}" + ("" if not sliding else " · full" if w is None else " · sliding")
               for i, w in enumerate(windows)]  # Gemma: which layers stop at their window
heat = go.Figure(go.Heatmap(z=per_layer.T, x=labels, y=layer_names, colorscale="Blues",
                            colorbar_title="bytes", hovertemplate="%{y}, %{x}<br>%{z:,} B<extra></extra>"))
heat.update_layout(height=460, margin=dict(l=10, r=10, t=10, b=10), yaxis_title="layer (L)",
                   yaxis_autorange="reversed", font=dict(size=13))
step_axis(heat, "x", labels, title="decode step")
st.plotly_chart(heat, width="stretch")

st.markdown("#### Per layer, from the real cache tensors")
rows = kv_cache.layer_holdings(m, trace.prefill.kv_bytes_per_layer, n_prompt)
per_position = kv_cache.position_bytes(m)
if not sliding:
    st.markdown(f"Every layer uses full attention, so each keeps all {n_prompt:,} prompt positions: "
                f"{rows[0]['bytes']:,} B per layer after prefill = {n_prompt:,} × {per_position:,} B "
                f"(2 × {Hkv} Hkv × {Dh} Dh × {bpv} B), read from the cache's key and value tensors.")
else:
    w = m.sliding_window
    held = {r["positions"] for r in rows if r["window"] is not None}
    measured, windowed = sum(r["bytes"] for r in rows), sum(r["window_bytes"] for r in rows)
    everything = sum(r["all_positions_bytes"] for r in rows)
    table = pd.DataFrame([{
        "layer": r["layer"], "attention": "full" if r["window"] is None else f"sliding window {r['window']:,}",
        "positions held": r["positions"], "bytes held (measured)": r["bytes"],
        "bytes per position": r["bytes"] // r["positions"] if r["positions"] else 0,
        f"keeping all {n_prompt:,}": r["all_positions_bytes"], "keeping the window": r["window_bytes"],
    } for r in rows])
    st.dataframe(table, hide_index=True, width="stretch", height=35 * (L + 1) + 3,  # every layer, no scrolling
                 column_config={c: st.column_config.NumberColumn(format="localized") for c in table.columns[2:]})
    if n_prompt < w:
        st.markdown(f"The prompt has {plural(n_prompt, 'token')}, fewer than the window of {w:,}: every layer still "
                    f"holds "
                    f"every position ({per_position:,} B each). Ask a question longer than {w:,} tokens to see the "
                    "sliding layers stop.")
    elif max(held) < n_prompt:
        st.markdown(f"A sliding layer can never read a key {w:,} or more positions back, so Hugging Face's cache "
                    f"drops those: here its sliding layers hold {', '.join(f'{h:,}' for h in sorted(held))} positions "
                    f"(the window less one: the next token brings the {w:,}th itself), the full layers all "
                    f"{n_prompt:,}. Measured: {human_bytes(measured)}; keeping every position in every layer would "
                    f"take {human_bytes(everything)}; an engine that keeps exactly the window, as the calculator "
                    f"below counts, {human_bytes(windowed)} ({windowed - measured:+,} B: "
                    f"{plural(len(sliding), 'position')} more, one per sliding layer).")
    else:
        st.markdown(f"This cache keeps every position even in the sliding layers, though they can never read keys "
                    f"{w:,} or more positions back: {human_bytes(measured)}. An engine that drops them would hold "
                    f"{human_bytes(windowed)} (the window in sliding layers, everything in full ones).")

st.subheader("2. Cache on vs off, measured")
st.markdown("Without a cache, every new token means running the whole conversation through the model again. "
            "With it, only the newest token goes through; the stored keys and values cover the rest. Both runs "
            "below use greedy choice and should pick the same tokens.")
c1, c2, c3 = st.columns([2, 2, 1])
n_steps = linked(c1.slider, "kv_n_steps", integer(2, 32), "Tokens to generate each way", 2, 32, 16, older=("steps",))
T = len(trace.ids)
limit = min(NO_CACHE_MAX_TOKENS, m.context_window)  # longest sequence the uncached run may re-read
offered = [k for k in REPEATS if T * k + n_steps <= limit]
skipped = [k for k in REPEATS if k not in offered]
if offered:
    repeat = linked(c2.radio, "kv_repeat", choice(REPEATS), "Prompt length", offered, horizontal=True,
                    format_func=lambda k: f"{k * T:,} tokens" + (" (your prompt)" if k == 1 else f" (× {k})"),
                    help="A longer context makes recomputing everything much more expensive.")
if skipped:
    st.caption(", ".join(f"× {k} ({T * k:,} + {n_steps} = {T * k + n_steps:,} tokens)" for k in skipped)
               + f" not offered: the run without a cache re-reads the whole sequence at every step, so this page "
               f"keeps it within {limit:,} tokens (the model's context window is {m.context_window:,}). "
               "Fewer tokens to generate, or a shorter question, bring more lengths back.")
if c3.button("Measure now", type="primary", key="kv_measure_btn", disabled=not offered):
    st.session_state["kv_measured"] = True
if not offered:
    st.info(f"Your prompt is {T:,} tokens: with {n_steps} new tokens the run without a cache would re-read up to "
            f"{T + n_steps:,} tokens at every step, more than the {limit:,} this page allows on a shared CPU. "
            "Ask a shorter question to measure cache on vs off.")
elif st.session_state.get("kv_measured"):
    r = measure(tuple(trace.ids) * repeat, n_steps)
    on, off, timing, fed = r["cache"], r["no_cache"], r["timing"], r["tokens_computed"]
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Tokens run through the model", f"{fed['cache']:,} vs {fed['no_cache']:,}",
              help="with the cache vs without it: this count does not depend on how busy the server is")
    c2.metric("With cache (median)", f"{timing.a_median:.2f} s",
              help=f"range {timing.a_range[0]:.2f}–{timing.a_range[1]:.2f} s over {r['repeats']} runs")
    c3.metric("Without cache (median)", f"{timing.b_median:.2f} s",
              help=f"range {timing.b_range[0]:.2f}–{timing.b_range[1]:.2f} s over {r['repeats']} runs")
    c4.metric("Same tokens chosen", "yes" if r["same_tokens"] else "no")
    st.markdown(f"**{fed['no_cache'] / max(fed['cache'], 1):.1f}× fewer tokens computed with the cache.** Measured "
                f"time: {timing.verdict('with the cache', 'without it')}.")
    x = list(range(r["n_steps"]))
    cmp = go.Figure()
    cmp.add_trace(go.Bar(x=x, y=[s * 1000 for s in on["seconds"]], name="with cache",
                         customdata=on["tokens_fed"], hovertemplate="step %{x}: tokens fed %{customdata}, %{y:.0f} ms"))
    cmp.add_trace(go.Bar(x=x, y=[s * 1000 for s in off["seconds"]], name="without cache",
                         customdata=off["tokens_fed"],
                         hovertemplate="step %{x}: %{customdata} tokens fed, %{y:.0f} ms"))
    cmp.update_layout(barmode="group", height=300, margin=dict(l=10, r=10, t=10, b=10),
                      xaxis_title="step (0 = the prompt itself)", yaxis_title="ms per step")
    st.plotly_chart(cmp, width="stretch")
    st.caption(f"Step 0 is the same for both: the {r['prompt_tokens']}-token prompt. After that the cached run feeds "
               f"1 token per step, the uncached run feeds the whole sequence (up to {off['tokens_fed'][-1]} tokens). "
               f"Each bar is the median of {r['repeats']} runs of each way, run alternately so that load on this "
               "shared CPU hits both alike.")
else:
    st.caption("Press the button to run both ways on the real model (a few seconds per token on this CPU).")

memory_calculator()
back_next()
