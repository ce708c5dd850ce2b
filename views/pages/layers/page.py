"""Layers: the residual stream, block by block, and what the model would say if it stopped early."""
import numpy as np
import plotly.graph_objects as go
import streamlit as st

from pipeline.stages import layers as la
from pipeline.text.pieces import token_pieces
from pipeline.text.unfinished import continuation_label
from ui.escape import axis_labels, plotly_label
from ui.plots import TICK_FONT, token_axis
from ui.words import clipped, plural
from views.chrome.frame import fragment, page_header
from views.chrome.navigation import back_next
from views.links.controls import linked
from views.links.params import WIDE, choice, integer
from views.pages.layers.commitment_strip import commitment_strip
from views.request.runs import run_for_page
from views.server.state import get_model

CELL_CHARS = 80  # characters of 12 px text across the lens's cells (about 600 px of plot)
LENS_MAX = 48  # most positions the logit lens reads at once: (L+1) x 48 rows of a (D x V) product, ~3 s here

page_header("Layers", "Each token's vector travels up a stack of L blocks. Every block reads the vector, computes a "
            "change with attention (looking at other tokens) and then with an MLP (thinking about this token "
            "alone), and adds both changes to it. This running vector is called the residual stream.")
trace = run_for_page()
lm = get_model()
m, p = trace.dims, trace.prefill
L, T, D = m.L, len(trace.tokens), m.D
names = [q.label for q in token_pieces(lm.tokenizer, trace.ids)]  # '토 (1/3)' for part of a character
labels = axis_labels(names)  # (T,) unique, escaped
layer_names = ["0 (embeddings)"] + [f"{i}" for i in range(1, L)] + [f"{L} (last)"]


def heatmap(z, y, title, ztitle, ytitle, colorscale="Viridis", fmt=".1f", **kw):
    kw.setdefault("hovertemplate", "token %{x}<br>layer %{y}<br>%{z:" + fmt + "}<extra></extra>")
    fig = go.Figure(go.Heatmap(z=z, x=labels, y=y, colorscale=colorscale,
                               colorbar=dict(title=ztitle, tickfont=TICK_FONT), **kw))
    fig.update_layout(height=560, margin=dict(t=40, l=10, r=10, b=10), title=title, font=dict(size=13))
    token_axis(fig, "x", labels, angle=-60, title="token position (T)")
    fig.update_yaxes(title=ytitle, type="category", autorange="reversed", tickfont=TICK_FONT)
    return fig


st.subheader("How long each vector is")
norms = la.norms(p.hidden_states)  # (L+1, T)
st.plotly_chart(heatmap(np.log10(norms), layer_names, "vector length (norm) per layer and token, log scale",
                        "log10 norm", "layer (L + 1 rows: 0 = embeddings)", customdata=norms,
                        hovertemplate="token %{x}<br>layer %{y}<br>norm %{customdata:.1f}<extra></extra>"),
                width="stretch", key="ly_norms")
st.caption("Each block adds to the vector, so lengths mostly grow with depth. A few tokens (often the very first one) "
           "grow far larger than the rest: models park spare attention there.")

st.subheader("How much each block changes the direction")
cos = la.consecutive_cosine(p.hidden_states)  # (L, T)
st.plotly_chart(heatmap(cos, [f"{i} → {i + 1}" for i in range(L)],
                        "cosine between a token's vector before and after each block", "cosine",
                        f"block (L = {L} rows: before → after)", colorscale="RdBu", fmt=".3f",
                        zmid=1.0 - (1.0 - float(cos.min())) / 2),
                width="stretch", key="ly_cosine")
st.caption(f"1 = the block left the direction unchanged. Mean over tokens: first block {cos[0].mean():.2f}, "
           f"middle {cos[L // 2].mean():.2f}, last {cos[-1].mean():.2f}. Low values = a block that rewrites a lot.")


@fragment
def contributions() -> None:
    st.subheader("Attention vs MLP: who writes more")
    c = la.contributions(p.attn_out, p.mlp_out)  # {"attention": (L, T), "mlp": (L, T)}
    plain = ["mean over all tokens"] + [f"({i}){n}" for i, n in enumerate(names)]
    c1, c2 = st.columns([3, 1])
    pick = linked(c1.selectbox, "ly_token", integer(0, WIDE), "token", range(T + 1), index=0,
                  format_func=plain.__getitem__)
    scale = linked(c2.radio, "ly_contrib_scale", choice(["log", "linear"]), "scale", ["log", "linear"], horizontal=True,
                   help="log: every factor of 10 is the same height, so small and huge writes both show")
    pick_values = (lambda a: a.mean(axis=1)) if pick == 0 else (lambda a: a[:, pick - 1])
    fig = go.Figure([go.Bar(name="attention's write", x=np.arange(L), y=pick_values(c["attention"]),
                            marker_color="#2a6f97"),
                     go.Bar(name="MLP's write", x=np.arange(L), y=pick_values(c["mlp"]), marker_color="#e76f51")])
    fig.update_layout(barmode="group", height=360, margin=dict(t=20, b=10), legend=dict(orientation="h", y=1.1),
                      xaxis_title="block (L)", yaxis_title="length of the change added (norm)", font=dict(size=13))
    fig.update_xaxes(tickfont=TICK_FONT, dtick=1 if L <= 32 else None)
    if scale == "log":  # ticks at powers of ten only: 1, 10, 100 (plotly's default adds 2 and 5 between them)
        fig.update_yaxes(type="log", dtick=1, tickfont=TICK_FONT)
    else:
        fig.update_yaxes(tickfont=TICK_FONT)
    st.plotly_chart(fig, width="stretch", key="ly_contrib")
    st.caption("hidden after block i = hidden before + attention's write + MLP's write. "
               f"The bars are the lengths of the two writes ({scale} scale).")


contributions()


@st.cache_data(max_entries=16, show_spinner="Reading these positions at every layer with the output head...")
def lens(ids: tuple, start: int, end: int, _hidden: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Only the shown positions: ((L+1, P, 1), (L+1, P, 1)); the whole prompt would be (L+1) x T rows."""
    return la.logit_lens(lm, _hidden, k=1, start=start, end=end)


@fragment
def logit_lens() -> None:
    st.subheader("Logit lens: what would the model say at each layer?")
    st.caption("Take the vector after layer i, apply the final norm and the output head as if it were the last "
               "layer, and read the most likely next token. The top row is the real prediction. Early layers mostly "
               "echo the input; the answer forms in the upper layers.")
    c1, c2 = st.columns(2)
    lo, hi = 4 if T >= 4 else 1, max(min(T, LENS_MAX), 4 if T >= 4 else 1)
    show = linked(c1.slider, "ly_positions", integer(1, WIDE), "positions shown", lo, hi, min(T, 16), within=(lo, hi))
    end = T  # positions start..end - 1 are read; the slider names the last one (T - 1 at the most)
    if T > show:
        end = 1 + linked(c2.slider, "ly_lens_end", integer(1, WIDE), "last position shown", show - 1, T - 1,
                         T - 1, within=(show - 1, T - 1),
                         help="Move the window back through a long prompt; each window is read once, then cached.")
    start = end - show
    ids, probs = lens(tuple(trace.ids), start, end, p.hidden_states)  # (L+1, P, 1) each
    fits = max(2, CELL_CHARS // show)  # characters that fit a cell: a longer label spilled into its neighbours
    cells = [[plotly_label(clipped(continuation_label(lm.tokenizer, trace.ids[:start + j + 1], int(t), short=True),
                                   fits)) for j, t in enumerate(row[:, 0])] for row in ids]
    hover = [[plotly_label(continuation_label(lm.tokenizer, trace.ids[:start + j + 1], int(t)))
              for j, t in enumerate(row[:, 0])] for row in ids]
    fig = go.Figure(go.Heatmap(z=probs[:, :, 0], x=labels[start:end], y=layer_names, text=cells, customdata=hover,
                               texttemplate="%{text}", textfont=dict(size=12), colorscale="YlGnBu", zmin=0, zmax=1,
                               colorbar=dict(title="probability", tickformat=".0%", tickfont=TICK_FONT),
                               hovertemplate="input %{x}<br>layer %{y}<br>next: %{customdata} (%{z:.1%})"
                                             "<extra></extra>"))
    fig.update_layout(height=max(640, 22 * (L + 1) + 160), margin=dict(t=20, l=10, r=10, b=10), font=dict(size=13))
    token_axis(fig, "x", labels[start:end], angle=-60, side="top",
               title="input token position (T): the prediction is for the token after it")
    fig.update_yaxes(title="layer (L + 1 rows: 0 = embeddings)", type="category", tickfont=TICK_FONT)
    st.plotly_chart(fig, width="stretch", key="ly_lens")
    if T > show:
        st.caption(f"Positions {start}–{end - 1} of {T:,}: the lens reads only the positions shown "
                   f"({L + 1} layers × {plural(show, 'position')}), so a long prompt stays quick.")


logit_lens()
commitment_strip(lm, trace)
back_next()
