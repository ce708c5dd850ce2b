"""Attention: which earlier tokens each token reads from, in every layer and head."""

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from views.common import current_trace, page_header
from pipeline.model.prefill import Prefill
from pipeline.stages.attention import attention_by_hand, attention_for_layer, weight_before
from ui.escape import axis_labels, code_span

WINDOW = 256  # most query/key positions drawn: a W × W heatmap of 65,536 cells stays quick in the browser

page_header("Attention", "Inside every layer, each token looks back at the tokens before it and decides how much "
            "of each to take in. One grid per head: row = the token that is looking (query), column = the token "
            "looked at (key). Each row adds up to 100 %. Cells to the right of the diagonal are the future: "
            "a token may never see them, so they are masked.")
trace = current_trace()
m, p = trace.dims, trace.prefill
L, H, Hkv, Dh = m.L, m.H, m.Hkv, m.Dh
T = len(trace.tokens)
start = max(0, T - WINDOW)  # first query/key position shown; 0 unless the prompt is longer than WINDOW
labels = axis_labels([t.text for t in trace.tokens])  # unique and escaped, for plotly
plain = [f"({i}){t.text}" for i, t in enumerate(trace.tokens)]  # widgets show text as text


@st.cache_data(max_entries=4, show_spinner="Computing this layer's attention...")
def layer_attention(request_id: str, ids: tuple[int, ...], layer: int, start: int, _p: Prefill) -> np.ndarray:
    """(H, T - start, T) float32: the weights of query rows start..T-1 over every key.

    The cache key is plain values (request id, prompt ids, layer, start), never the tensors.
    """
    return attention_for_layer(_p, layer, first_row=start)


c1, c2 = st.columns(2)
layer = c1.slider("layer", 0, L - 1, 0, key="at_layer")
head = c2.selectbox("query head", range(H), index=0, key="at_head",
                    format_func=lambda h: f"head {h} (reads KV head {m.kv_head(h)})")
rows = layer_attention(trace.request.id, tuple(trace.ids), layer, start, p)  # (H, T - start, T), once per rerun
A = rows[head]  # (T - start, T) rows = queries start..T-1, columns = keys
W = T - start
win = A[:, start:]  # (W, W) the window: queries and keys start..T-1

future = np.triu(np.ones((W, W), dtype=bool), k=1)
wlabels = labels[start:]
fig = go.Figure([
    # In a window the weight on left-out earlier tokens is missing, so the colours stretch to what is shown.
    go.Heatmap(z=np.where(future, np.nan, win), x=wlabels, y=wlabels, colorscale="Blues", zmin=0,
               zmax=1 if not start else max(float(win.max()), 1e-6),
               colorbar=dict(title="weight", tickformat=".0%"),
               hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.1%}<extra></extra>"),
    go.Heatmap(z=np.where(future, 1.0, np.nan), x=wlabels, y=wlabels, showscale=False,
               colorscale=[[0, "#e5e5e5"], [1, "#e5e5e5"]],
               hovertemplate="query %{y}<br>key %{x}<br>future: masked (−∞ → 0 %)<extra></extra>"),
])
size = f"T × T = {T} × {T}" if not start else f"last {W} of T = {T} positions"
fig.update_layout(height=max(480, 16 * W + 160) if not start else 8 * W + 160, margin=dict(t=30, l=10, r=10, b=10),
                  title=f"layer {layer}, head {head}: attention weights ({size}); grey = masked future")
fig.update_xaxes(title="key position (T): the token looked at", tickangle=-60, tickfont=dict(size=9))
fig.update_yaxes(title="query position (T): the token looking", autorange="reversed", tickfont=dict(size=9))
st.plotly_chart(fig, width="stretch", key="at_heatmap")
if start:
    earlier = weight_before(A, start)  # (W,) weight each shown query puts on keys before the window
    st.caption(f"The prompt has T = {T:,} tokens; the grid shows only the last {W} query and key positions "
               f"({start}–{T - 1}) so it stays readable and quick to draw. Rows still add up to 100 % over all "
               f"{T:,} keys: the shown rows put {earlier.min():.0%}–{earlier.max():.0%} of their weight on the "
               f"{start:,} earlier tokens left out of the grid.")


@st.fragment
def one_row(A: np.ndarray) -> None:
    """A: (T - start, T) this head's rows for queries start..T-1."""
    st.subheader("One token's row")
    i = st.selectbox("token that is looking", range(start, T), index=W - 1, format_func=plain.__getitem__,
                     key="at_row")
    row = A[i - start]  # (T,) weights over every key; zero after i
    fig = go.Figure(go.Bar(x=labels[start: i + 1], y=row[start: i + 1], marker_color="#2a6f97",
                           hovertemplate="%{x}<br>%{y:.1%}<extra></extra>"))
    fig.update_layout(height=320, margin=dict(t=20, b=10), yaxis_tickformat=".0%",
                      xaxis_title="key position (T), up to and including the token itself",
                      yaxis_title="attention weight")
    fig.update_xaxes(tickangle=-60, tickfont=dict(size=9))
    st.plotly_chart(fig, width="stretch", key="at_row_chart")
    if start:
        st.caption(f"Bars from position {start} on; the {start:,} earlier tokens get {row[:start].sum():.1%} "
                   "together.")
    best = np.argsort(-row[: i + 1])[:3]
    st.markdown("Reads most from: " + ", ".join(f"{code_span(trace.tokens[j].text)} ({row[j]:.0%})" for j in best))


one_row(A)

st.subheader("Shared keys and values (grouped-query attention)")
group = H // Hkv
st.markdown(f"This model has H = {H} query heads but only Hkv = {Hkv} key/value heads: every {group} query heads "
            f"share one set of keys and values. That makes the KV cache {group}× smaller; each query head still asks "
            "its own question, so heads in one group can look at different tokens.")
st.dataframe(pd.DataFrame({"KV head": range(Hkv),
                           "query heads reading it": [", ".join(str(h) for h in range(g * group, (g + 1) * group))
                                                      for g in range(Hkv)]}), hide_index=True)
same = [h for h in range(H) if h // group == head // group]
st.caption(f"Head {head} shares KV head {head // group} with heads {', '.join(str(h) for h in same if h != head)}. "
           f"Where each of them puts most weight for the last token: "
           + ", ".join(f"head {h} → {trace.tokens[int(np.argmax(rows[h, -1]))].text!r}" for h in same))


@st.fragment
def by_hand(A: np.ndarray) -> None:
    """A: (T - start, T) this head's rows for queries start..T-1."""
    st.subheader("Attention by hand, on four tokens")
    st.caption("The same steps the model runs, with this head's real numbers, but on only four tokens so the grid "
               "fits on screen. Each token's query vector q and key vector k have Dh = "
               f"{Dh} numbers.")
    user = [t.index for t in trace.tokens if t.role == "user" and t.index >= start]
    default = (user[-4:] if len(user) >= 4 else list(range(T))[-4:])
    chosen = st.multiselect("four tokens (in prompt order)", range(start, T), default=default, max_selections=4,
                            format_func=plain.__getitem__, key="at_hand_tokens")
    if len(chosen) < 2:
        st.info("Pick at least two tokens.")
        return
    r = attention_by_hand(p.q_rot[layer], p.k_rot[layer], p.v[layer], head, chosen)
    names = [trace.tokens[i].text for i in r["positions"]]
    frame = lambda a, fmt: pd.DataFrame(a, index=[f"({i}) {n}" for i, n in zip(r["positions"], names)],  # noqa: E731
                                        columns=[f"({i}) {n}" for i, n in zip(r["positions"], names)]).map(fmt)
    a, b = st.columns(2)
    a.markdown(f"**1. Compare**: each row's q · each column's k, divided by √Dh = √{Dh} = {np.sqrt(Dh):.0f}.")
    a.dataframe(frame(r["compare"], lambda x: f"{x:.2f}"))
    b.markdown("**2. Mask**: a token may not look at later tokens, so those scores become −∞.")
    b.dataframe(frame(r["masked"], lambda x: "−∞" if np.isneginf(x) else f"{x:.2f}"))
    a, b = st.columns(2)
    a.markdown("**3. Softmax**: e^score for each cell, divided by the row's total; e^−∞ = 0.")
    a.dataframe(frame(r["weights"], lambda x: f"{x:.1%}"))
    last = int(r["positions"][-1])
    full = A[last - start, r["positions"]]
    a.caption(f"In the real model the row of ({last}) spreads over all {last + 1} tokens before it, not just these "
              f"four; there these four get {', '.join(f'{w:.1%}' for w in full)}.")
    b.markdown(f"**4. Mix**: the new vector = weights × value vectors (KV head {r['kv_head']}). First 5 of {Dh} numbers:")
    mix = pd.DataFrame(np.vstack([r["values"][:, :5], r["mixed"][-1:, :5]]),
                       index=[f"value of ({i}) {n}" for i, n in zip(r["positions"], names)] + [f"mix for ({last})"],
                       columns=[f"d{j}" for j in range(5)])
    b.dataframe(mix.map(lambda x: f"{x:+.3f}"))


by_hand(A)
