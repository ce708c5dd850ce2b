"""Position (RoPE): how the model knows where a token stands, by turning q and k."""
import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.stages import position as rope
from pipeline.text.pieces import token_pieces
from ui.escape import markdown_text
from ui.plots import TICK_FONT
from views.chrome.frame import page_header
from views.chrome.navigation import back_next
from views.links.controls import linked
from views.links.params import WIDE, integer
from views.request.runs import run_for_page
from views.server.state import get_model

page_header("Position (RoPE)", "An embedding row says which token it is, not where it stands. "
            f"{markdown_text(get_model().name)} adds position "
            "inside attention: before comparing, each query and key vector is cut into pairs of numbers and each "
            "pair is turned like a clock hand by an angle that grows with the position. Some pairs turn fast, "
            "others very slowly.")
trace = run_for_page()
m, p = trace.dims, trace.prefill
Dh, H, Hkv, L = m.Dh, m.H, m.Hkv, m.L
T = len(trace.tokens)
pairs = Dh // 2
layer = linked(st.slider, "rope_layer", integer(0, L - 1), "layer", 0, L - 1, min(10, L - 1), older=("layer",))
base = m.rope_base_of(layer)  # Gemma 3: 10,000 in sliding-window layers, 1,000,000 in full ones
by_base: dict[float, list[int]] = {}
for n in range(L):
    by_base.setdefault(m.rope_base_of(n), []).append(n)
if len(by_base) > 1:  # the shorter lists first, named layer by layer
    groups = sorted(by_base.items(), key=lambda g: len(g[1]))
    st.caption(f"{markdown_text(m.name)} turns with {len(groups)} bases: "
               + "; ".join(f"{b:,.0f} in layers {', '.join(map(str, ls))}" if n < len(groups) - 1 else
                           f"{b:,.0f} in the other {len(ls)}" for n, (b, ls) in enumerate(groups))
               + f". Layer {layer} uses **{base:,.0f}**: everything below is this layer's.")

st.subheader("The angle for every position and pair")
n_pos = max(T, 64)
ang = rope.angles(np.arange(n_pos), Dh, base)  # (P, Dh/2) radians
fig = go.Figure(go.Heatmap(z=np.mod(ang, 2 * np.pi), colorscale="Twilight", zmin=0, zmax=2 * np.pi,
                           colorbar=dict(title="angle mod 2π"),
                           customdata=ang, hovertemplate="position %{y}<br>pair %{x}<br>angle %{customdata:.3f} rad"
                                                         "<extra></extra>"))
fig.update_layout(height=420, margin=dict(t=20, b=10), font=dict(size=13))
fig.update_xaxes(title=f"frequency pair i (Dh/2 = {pairs}; pair i = dimensions i and i + {pairs})", tickfont=TICK_FONT)
fig.update_yaxes(title="position (T)", autorange="reversed", tickfont=TICK_FONT)
st.plotly_chart(fig, width="stretch", key="rope_angles")
speed = rope.inv_freq(Dh, base)  # (Dh/2,) radians per position
st.caption(f"Angle = position × base^(−2i/Dh) with layer {layer}'s real base = {base:,.0f} and Dh = {Dh}. Pair 0 turns "
           f"{speed[0]:.0f} radian per token (a full turn every {2 * np.pi / speed[0]:.1f} tokens); pair {pairs - 1} "
           f"turns {speed[-1]:.2e} radian per token (a full turn every {2 * np.pi / speed[-1]:,.0f} tokens). "
           "Fast pairs tell neighbours apart, slow pairs still change over thousands of tokens.")

st.subheader("Only the distance matters: a check on real vectors")
st.caption("Turning q by angle a and k by angle b changes their dot product only through a − b. So if both tokens "
           "moved along by the same number of positions, their score would not change. Below: one head's real q "
           "and k (turned back to before RoPE), placed at shifted positions.")
plain = [f"({i}){q.label}" for i, q in enumerate(token_pieces(get_model().tokenizer, trace.ids))]
c = st.columns(3)
head = linked(c[0].selectbox, "rope_head", integer(0, H - 1), "query head", range(H), index=0, older=("head",))
i = linked(c[1].selectbox, "rope_i", integer(0, WIDE), "query token (i)", range(T), index=T - 1,
           format_func=plain.__getitem__)
j = linked(c[2].selectbox, "rope_j", integer(0, WIDE), "key token (j)", range(i + 1), index=min(i, max(0, i - 5)),
           format_func=plain.__getitem__)
kv = m.kv_head(head)
q, k = rope.layer_pre_rope(p, m, layer, head)  # (T, Dh) each, before RoPE, turned back with this layer's base
shifts = [0, 1, 10, 100, 1000, 5000]
scores = rope.shifted_scores(q[i], k[j], i, j, shifts, base)  # (S,)
model_score = float(p.q_rot[layer, head, i].astype(np.float32) @ p.k_rot[layer, kv, j].astype(np.float32)
                    / np.float32(np.sqrt(Dh)))  # the run's own vectors, multiplied in float32 as the model does
st.dataframe(pd.DataFrame({
    "shift s": shifts, "query at position": [i + s for s in shifts], "key at position": [j + s for s in shifts],
    "distance": [i - j] * len(shifts), "score q·k/√Dh": [f"{x:.6f}" for x in scores],
}), hide_index=True, width="stretch")
ours = float(scores[0])
stored = "float32" if p.q_rot.dtype == np.float32 else "float16"
st.markdown(f"**What is compared with what.** Every row above is *our* recomputation in float64: the captured q "
            f"and k turned back to before RoPE with layer {layer}'s base ({base:,.0f}), then turned again at the "
            f"shifted positions. (That turning back gives the model's own q and k before RoPE: the project's tests "
            f"check it against the model's projections, in every kind of layer.) These rows agree with each "
            f"other to {np.ptp(scores):.1e}, the rounding of float64: the shift changes nothing. The *model's own* "
            f"score for this pair during the run was **{model_score:.6f}**: the run's q and k (stored in {stored}) "
            f"multiplied in float32; it differs from our shift-0 row by {abs(model_score - ours):.1e}. That gap is "
            f"the model's {stored} rounding (about 7 significant digits for float32, 3 for float16), not an effect "
            "of position.")

dist = np.arange(0, 257)
by_d = rope.score_by_distance(q[i], k[j], dist, base)  # (N,)
fig = go.Figure(go.Scatter(x=dist, y=by_d, mode="lines", line=dict(color="#6a4c93")))
fig.add_vline(x=i - j, line_dash="dot", annotation_text=f"real distance {i - j}")
fig.update_layout(height=320, margin=dict(t=40, b=10), font=dict(size=13),
                  xaxis_title="distance between the two tokens (positions)",
                  yaxis_title="score q·k/√Dh",
                  title="the same two vectors at different distances: now the score does change")
st.plotly_chart(fig, width="stretch", key="rope_distance")
back_next()
