"""Layers: the residual stream, block by block, and what the model would say if it stopped early."""
import numpy as np
import plotly.graph_objects as go
import streamlit as st

from views.common import current_trace, get_model, page_header
from pipeline.stages import layers as la
from pipeline.text import token_text
from ui.escape import axis_labels, plotly_label

page_header("Layers", "Each token's vector travels up a stack of L blocks. Every block reads the vector, computes a "
            "change with attention (looking at other tokens) and then with an MLP (thinking about this token "
            "alone), and adds both changes to it. This running vector is called the residual stream.")
trace = current_trace()
lm = get_model()
m, p = trace.dims, trace.prefill
L, T, D = m.L, len(trace.tokens), m.D
labels = axis_labels([t.text for t in trace.tokens])  # (T,) unique, escaped
layer_names = ["0 (embeddings)"] + [f"{i}" for i in range(1, L)] + [f"{L} (last)"]


def heatmap(z, y, title, ztitle, colorscale="Viridis", fmt=".1f", **kw):
    kw.setdefault("hovertemplate", "token %{x}<br>layer %{y}<br>%{z:" + fmt + "}<extra></extra>")
    fig = go.Figure(go.Heatmap(z=z, x=labels, y=y, colorscale=colorscale, colorbar=dict(title=ztitle), **kw))
    fig.update_layout(height=520, margin=dict(t=40, l=10, r=10, b=10), title=title)
    fig.update_xaxes(title="token position (T)", tickangle=-60, tickfont=dict(size=9))
    fig.update_yaxes(title="layer (L + 1 rows)", type="category", autorange="reversed")
    return fig


st.subheader("How long each vector is")
norms = la.norms(p.hidden_states)  # (L+1, T)
st.plotly_chart(heatmap(np.log10(norms), layer_names, "vector length (norm) per layer and token, log scale",
                        "log10 norm", customdata=norms,
                        hovertemplate="token %{x}<br>layer %{y}<br>norm %{customdata:.1f}<extra></extra>"),
                width="stretch", key="ly_norms")
st.caption("Each block adds to the vector, so lengths mostly grow with depth. A few tokens (often the very first one) "
           "grow far larger than the rest: models park spare attention there.")

st.subheader("How much each block changes the direction")
cos = la.consecutive_cosine(p.hidden_states)  # (L, T)
st.plotly_chart(heatmap(cos, [f"{i} → {i + 1}" for i in range(L)],
                        "cosine between a token's vector before and after each block", "cosine",
                        colorscale="RdBu", fmt=".3f", zmid=1.0 - (1.0 - float(cos.min())) / 2),
                width="stretch", key="ly_cosine")
st.caption(f"1 = the block left the direction unchanged. Mean over tokens: first block {cos[0].mean():.2f}, "
           f"middle {cos[L // 2].mean():.2f}, last {cos[-1].mean():.2f}. Low values = a block that rewrites a lot.")


@st.fragment
def contributions() -> None:
    st.subheader("Attention vs MLP: who writes more")
    c = la.contributions(p.attn_out, p.mlp_out)  # {"attention": (L, T), "mlp": (L, T)}
    plain = ["mean over all tokens"] + [f"({i}){t.text}" for i, t in enumerate(trace.tokens)]
    pick = st.selectbox("token", range(T + 1), index=0, format_func=plain.__getitem__, key="ly_token")
    pick_values = (lambda a: a.mean(axis=1)) if pick == 0 else (lambda a: a[:, pick - 1])
    fig = go.Figure([go.Bar(name="attention's write", x=np.arange(L), y=pick_values(c["attention"]), marker_color="#2a6f97"),
                     go.Bar(name="MLP's write", x=np.arange(L), y=pick_values(c["mlp"]), marker_color="#e76f51")])
    fig.update_layout(barmode="group", height=340, margin=dict(t=20, b=10), legend=dict(orientation="h", y=1.1),
                      xaxis_title="block (L)", yaxis_title="length of the change added (norm)", yaxis_type="log")
    st.plotly_chart(fig, width="stretch", key="ly_contrib")
    st.caption("hidden after block i = hidden before + attention's write + MLP's write. The bars are the lengths of the "
               "two writes (log scale).")


contributions()


@st.cache_data(max_entries=8, show_spinner="Reading every layer with the output head...")
def lens(ids: tuple, _hidden: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return la.logit_lens(lm, _hidden, k=1)  # ((L+1, T, 1), (L+1, T, 1))


@st.fragment
def logit_lens() -> None:
    st.subheader("Logit lens: what would the model say at each layer?")
    st.caption("Take the vector after layer i, apply the final norm and the output head as if it were the last "
               "layer, and read the most likely next token. The top row is the real prediction. Early layers mostly "
               "echo the input; the answer forms in the upper layers.")
    ids, probs = lens(tuple(trace.ids), p.hidden_states)
    show = st.slider("positions shown (the last ones)", 4, T, min(T, 16), key="ly_positions")
    start = T - show
    text = [[plotly_label(token_text(lm.tokenizer, int(t))) for t in row[start:, 0]] for row in ids]
    fig = go.Figure(go.Heatmap(z=probs[:, start:, 0], x=labels[start:], y=layer_names, text=text,
                               texttemplate="%{text}", textfont=dict(size=9), colorscale="YlGnBu", zmin=0, zmax=1,
                               colorbar=dict(title="probability", tickformat=".0%"),
                               hovertemplate="input %{x}<br>layer %{y}<br>next: %{text} (%{z:.1%})<extra></extra>"))
    fig.update_layout(height=max(560, 20 * (L + 1) + 140), margin=dict(t=20, l=10, r=10, b=10))
    fig.update_xaxes(title="input token position (T): the prediction is for the token after it", tickangle=-60,
                     tickfont=dict(size=9), side="top")
    fig.update_yaxes(title="layer (L + 1 rows)", type="category")
    st.plotly_chart(fig, width="stretch", key="ly_lens")


logit_lens()
