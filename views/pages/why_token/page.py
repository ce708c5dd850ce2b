"""Why this token: which parts of the network pushed the chosen token's score, and proof by changing them."""
import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.attribution import dla
from pipeline.attribution import graph as gr
from pipeline.attribution import interventions as iv
from pipeline.attribution.record import MAX_POSITIONS, record_step, step_ids
from pipeline.attribution.nodes import graph_nodes
from pipeline.attribution.window import attribution_window
from pipeline.core.maths import softmax
from pipeline.text.pieces import token_pieces
from pipeline.text.token_names import token_text
from ui.escape import markdown_text
from ui.heat import heat_chips
from ui.plots import TICK_FONT
from ui.words import plural
from views.chrome.frame import end_page, fragment, page_header
from views.chrome.navigation import back_next
from views.links.controls import linked
from views.links.params import WIDE, choice, integer, number
from views.pages.why_token import graph as why_graph
from views.pages.why_token import qk as why_qk
from views.pages.why_token.kept_result import kept_result
from views.pages.why_token.neurons import neurons_section
from views.pages.why_token.patching import patching_section
from views.request.runs import run_for_page
from views.request.session import current_request
from views.server.state import get_model

page_header("Why this token", "The model gave its chosen token the highest score. Which layers, heads and "
            "input tokens pushed that score up? This page splits the score into parts, draws the routes the "
            "information took, and then proves it: switch a part off, run the model again, and see the answer move.")
trace = run_for_page()
lm = get_model()
m = trace.dims
L, H = m.L, m.H
S = len(trace.generated_token_ids)
if S == 0:
    st.info("This run chose no token, so there is nothing to explain.")
    end_page()

IG_KINDS = ["integrated gradients", "gradient × input"]
c1, c2, c3 = st.columns(3)
answer = token_pieces(lm.tokenizer, trace.generated_token_ids)
step = linked(c1.selectbox, "why_step", integer(0, WIDE), "decode step", range(S),
              format_func=lambda s: f"{s}: {answer[s].label}",
              help="Step S is scored from the prompt and the first S answer tokens.")
window = attribution_window(step_ids(trace.ids, trace.generated_token_ids, step))  # at most MAX_POSITIONS
ids = window.ids
top = trace.steps[step].top
choices = [int(c.id) for c in top]
chosen = int(trace.generated_token_ids[step])
if chosen not in choices:
    choices.insert(0, chosen)
name = {c: token_text(lm.tokenizer, c) for c in choices}
target = linked(c2.selectbox, "why_target", integer(0, 1 << 22), "token to explain", choices,
                index=choices.index(chosen),
                format_func=lambda c: f"{name[c]} (id {c})" + (" · chosen" if c == chosen else ""))
minus = linked(c3.selectbox, "why_minus", integer(0, 1 << 22), "minus (a difference of two scores)",
               [None] + [c for c in choices if c != target],
               format_func=lambda c: "nothing: the score itself" if c is None else f"{name[c]} (id {c})")
plain_tokens = [p.label for p in token_pieces(lm.tokenizer, ids)]


@st.cache_resource(max_entries=4, show_spinner="Running the model once over this step's tokens, with hooks...")
def step_record(model_name: str, ids: tuple):
    """The captured pass of one step (kept as Python objects: the attention weights are up to ~140 MB)."""
    return record_step(lm, list(ids))


rec = step_record(m.name, tuple(ids))
if window.left_out:
    first, last = window.left_out_span
    p_run, p_here = softmax(trace.step_logits[step])[chosen], softmax(rec.logits)[chosen]
    st.info(f"This step reads {window.total:,} positions; attribution holds at most {MAX_POSITIONS}. Everything below "
            f"reads the first token and the last {MAX_POSITIONS - 1:,}: positions {first:,}–{last:,} "
            f"({plural(window.left_out, 'token')}) are left out. On this shorter text the model gives "
            f"“{markdown_text(name[chosen])}” {p_here:.1%} (the whole run: {p_run:.1%}).")
what = f"“{name[target]}”" + (f" minus “{name[minus]}”" if minus is not None else "")
a = dla.direct_logit_attribution(rec, lm, target, minus)

st.subheader("1. Direct logit attribution: who added to the score")
st.markdown(f"Score (logit) of {markdown_text(what)}: **{a.logit:.3f}**. The embedding, plus each layer's attention "
            f"and MLP, add up to **{a.total:.3f}**.")
st.caption("How: the last vector is the sum of everything the layers wrote. The final norm divides it by its length; "
           "we freeze that divisor at this run's value, so the score becomes a plain sum of one score per part. "
           "The sum is exact; each part alone is a linear reading (remove a part for real and the divisor would "
           "change too: section 3 does exactly that).")
fig = go.Figure([go.Bar(name="attention", x=list(range(L)), y=a.attention, marker_color="#2a6f97"),
                 go.Bar(name="MLP", x=list(range(L)), y=a.mlp, marker_color="#e76f51")])
fig.update_layout(barmode="group", height=340, margin=dict(t=30, b=10), legend=dict(orientation="h", y=1.12),
                  xaxis_title=f"layer (L = {L}); the embedding adds {a.embedding:+.3f}",
                  yaxis_title="added to the score", font=dict(size=13))
fig.update_xaxes(tickfont=TICK_FONT, dtick=1 if L <= 32 else None)
st.plotly_chart(fig, width="stretch", key="why_dla")

heat = go.Figure(go.Heatmap(z=a.heads, x=[f"head {h}" for h in range(H)], y=[str(i) for i in range(L)],
                            colorscale="RdBu", zmid=0, reversescale=True,
                            colorbar=dict(title="added", tickfont=TICK_FONT),
                            hovertemplate="layer %{y}, %{x}<br>adds %{z:+.3f}<extra></extra>"))
heat.update_layout(height=max(360, 18 * L + 120), margin=dict(t=30, b=10), title="each head's part (layer × head)")
heat.update_yaxes(title="layer", type="category", autorange="reversed", tickfont=TICK_FONT)
st.plotly_chart(heat, width="stretch", key="why_heads")
best = np.unravel_index(int(np.argmax(a.heads)), a.heads.shape)
st.caption(f"The heads of a layer add up to that layer's attention bar. Strongest push: layer {best[0]}, head "
           f"{best[1]} ({a.heads[best]:+.3f}).")


def promoted_table(layer: int, head: int | None) -> None:
    up, down = dla.promoted_tokens(rec, lm, layer, head)
    rows = [{"promotes": token_text(lm.tokenizer, u), "by": round(su, 3),
             "suppresses": token_text(lm.tokenizer, d), "by ": round(sd, 3)} for (u, su), (d, sd) in zip(up, down)]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")


h1, h2 = st.columns(2)
layer_pick = linked(h1.number_input, "why_layer", integer(0, L - 1), "layer", 0, L - 1, int(best[0]))
head_pick = linked(h2.selectbox, "why_head", integer(0, H), "head (or the layer's MLP)", range(H + 1),
                   index=int(best[1]),
                   format_func=lambda h: "MLP" if h == H else f"head {h}")  # H: the MLP (a link can say so)
head_pick = None if head_pick == H else head_pick
st.caption("What this part writes, read through the final norm and the output matrix: the tokens it raises most "
           "and lowers most.")
promoted_table(int(layer_pick), head_pick)
if head_pick is not None:
    st.markdown(f"**Why layer {int(layer_pick)} head {head_pick} attends where it does**")
    # an option's label never depends on the step: a picked position keeps its label when the step moves (a label
    # that did, "· the last", stayed stale in the browser after the step changed)
    query = linked(st.selectbox, "why_qk_query", integer(0, WIDE),
                   f"looking from (query position; the last is {window.positions[-1]})", range(len(ids) - 1, -1, -1),
                   format_func=lambda t: f"({window.positions[t]}) {plain_tokens[t]}")
    why_qk.qk_panel(lm, rec, int(layer_pick), head_pick, int(query), plain_tokens, "why_qk")
neurons_section(lm, rec, target, a.mlp, plain_tokens, window.positions)


@fragment
def routes() -> None:
    st.subheader("2. The contribution graph: the routes to the prediction")
    st.caption("After Ferrando & Voita (2024), as llm-transparency-tool draws it. At each layer a position's vector "
               "is updated by what every head carries from every earlier token, and then by the MLP. Each part's "
               "share is how close it is to the updated vector (L1 distance), so the shares of a layer add up to 1. "
               "Starting from the predicted token at the top, only routes above the threshold are kept.")
    g1, g2 = st.columns(2)
    threshold = linked(g1.slider, "why_threshold", number(0.01, 0.5), "threshold (smallest share kept)", 0.01, 0.5,
                       0.04, 0.01)
    cap = linked(g2.slider, "why_cap", integer(2, 32), "positions kept per layer (strongest first)", 2, 32, 10)
    g = gr.contribution_graph(rec, lm, threshold, cap)
    why_graph.graph_chart(g, graph_nodes(g), plain_tokens, window.positions, L)
    st.caption(f"{plural(len(g.edges), 'route')} above {threshold:.2f}" + (
        f"; some layers had more positions above it than {cap}: only the strongest are drawn." if g.capped else "."))
    st.markdown("**One node at a time**: click a head, an MLP or an input token in the graph (or pick it here).")
    why_qk.node_panel(lm, rec, g, a, target, name[target], plain_tokens, window.positions)

routes()

st.subheader("3. Proof by intervention")
st.caption("Switch one part off in the real model and run this step's tokens again (one forward pass): does the "
           "token's probability fall, and does the answer change? “zero” writes nothing; “mean” writes the part's "
           "average over all positions, keeping its usual size but removing what is special about this text.")
a1, a2, a3 = st.columns(3)
ab_layer = linked(a1.number_input, "why_ab_layer", integer(0, L - 1), "layer ", 0, L - 1, int(best[0]))
ab_head = linked(a2.selectbox, "why_ab_head", integer(0, H), "part", range(H + 1), index=int(best[1]),
                 format_func=lambda h: "MLP" if h == H else f"head {h}")
ab_head = None if ab_head == H else ab_head
mode = linked(a3.radio, "why_ab_mode", choice(iv.MODES), "ablation", iv.MODES, horizontal=True)
pressed = st.button("Ablate and run again", key="why_ablate")
r = kept_result("why_ablation", (m.name, tuple(ids), target, int(ab_layer), ab_head, mode),
                (lambda: iv.ablate(lm, ids, target, int(ab_layer), ab_head, mode, clean_logits=rec.logits))
                if pressed else None)  # kept until one of its inputs changes
if r is not None:
    part = "MLP" if ab_head is None else f"head {ab_head}"
    st.markdown(f"Layer {int(ab_layer)} {part} ({mode}): probability of “{markdown_text(name[target])}” "
                f"{r.prob_before:.1%} → **{r.prob_after:.1%}**, score {r.logit_before:.2f} → {r.logit_after:.2f}. "
                + (f"The top token changes to “{markdown_text(token_text(lm.tokenizer, r.top_after))}”."
                   if r.answer_changes else "The top token stays the same."))


@st.cache_data(max_entries=8, show_spinner="Integrated gradients: the model forward and backward, 30 times or more...")
def inputs(model_name: str, ids: tuple, target: int, positions: tuple):
    from pipeline.attribution.gradients import input_attribution

    return input_attribution(lm, list(ids), target, positions=list(positions) or None)


st.subheader("4. Input attribution: which prompt tokens mattered")
moving = tuple(k for k in (window.index_of(i) for i in [t.index for t in trace.tokens if t.role == "user"]
                            + list(range(len(trace.ids), window.total))) if k is not None)  # window positions
st.caption("Integrated gradients: slide each input vector of your message (and of the answer so far) from a "
           "neutral one (the end token's embedding) to the real one, the rest of the prompt kept as it is, and add "
           "up how the token's log-probability responds on the way. The parts add up to the whole change in "
           "log-probability, up to the error of the integral: it starts with 30 points on the way and adds more "
           "where the parts of the way miss their own change, until the whole misses by under 4 % (said under the "
           "chips).")
ig_key = (m.name, tuple(ids), target)
if st.button("Compute integrated gradients", key="why_ig") or st.session_state.get("why_ig_done") == ig_key:
    st.session_state["why_ig_done"] = ig_key
    ia = inputs(m.name, tuple(ids), target, moving)
    kind = linked(st.radio, "why_ig_kind", choice(IG_KINDS), "method", IG_KINDS, horizontal=True)
    values = ia.integrated if kind == "integrated gradients" else ia.grad_x_input
    shown = list(moving) or list(range(len(ids)))
    st.html(heat_chips([plain_tokens[i] for i in shown], values[shown]))
    st.caption(f"Red raises the log-probability of “{name[target]}”, blue lowers it (hover a chip for its value). "
               f"Sum {ia.integrated.sum():+.3f} against the change {ia.log_prob - ia.baseline_log_prob:+.3f} "
               f"(off by {ia.completeness_gap:.1%}, with {ia.steps} points on the way in {ia.panels} parts).")


patching_section(lm, current_request(), list(trace.ids), trace.timings.prefill_s)
back_next()
