"""Why this token, one level deeper: why a head attends where it does (its scores split into query part x key part
terms), and one node of the contribution graph at a time (what it writes, its share, its QK split, ablating it).
Draws what pipeline/attribution/qk.py and nodes.py computed."""
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.attribution import dla
from pipeline.attribution import interventions as iv
from pipeline.attribution.nodes import Node, ablate_node, direct_part, graph_nodes, node_vector
from pipeline.attribution.qk import grouped, largest_terms, qk_attribution
from pipeline.model.interface import LanguageModel
from pipeline.text.token_names import token_text
from ui.escape import markdown_text, plotly_label
from ui.plots import TICK_FONT
from views.links.controls import left_out, linked
from views.links.params import choice

TOP_KEYS = 5  # keys whose terms are split
MATRIX_PARTS = 6  # rows and columns of the small matrix before "other parts"


@st.cache_data(max_entries=32, show_spinner="Splitting this head's scores (one more pass over the step)...")
def _split(model_name: str, ids: tuple, layer: int, head: int, query: int, _lm, _rec):
    return qk_attribution(_lm, _rec, layer, head, query, top=TOP_KEYS)


def qk_panel(lm: LanguageModel, rec, layer: int, head: int, query: int, tokens: list[str], key: str) -> None:
    """One head's top keys at one query position, the chosen key's score as a small matrix of terms, in words."""
    qa = _split(lm.dims.name, tuple(rec.ids), int(layer), int(head), int(query), lm, rec)
    names = {k.position: f"({k.position}) {tokens[k.position]}" for k in qa.keys}
    st.markdown(f"Layer {layer}, head {head}, looking from **{markdown_text(names.get(query) or tokens[query])}** "
                f"(position {query}). Its top keys:")
    st.dataframe(pd.DataFrame([{"key": names[k.position], "score": round(k.score, 3), "weight": f"{k.probability:.1%}",
                                "terms add up to": round(k.terms_sum, 3)} for k in qa.keys]),
                 hide_index=True, width="stretch")
    pick = left_out(st.selectbox, f"{key}_key_{layer}_{head}_{query}", "one of the picked head's top keys: a new "
                    "head or query position starts again at its top key", "key to split", [k.position for k in qa.keys],
                    format_func=names.get)
    chosen = next(k for k in qa.keys if k.position == pick)
    rows, cols, m = grouped(qa.parts, chosen.terms, MATRIX_PARTS)
    fig = go.Figure(go.Heatmap(z=m, x=[plotly_label(c) for c in cols], y=[plotly_label(r) for r in rows],
                               colorscale="RdBu", zmid=0, reversescale=True, texttemplate="%{z:+.2f}",
                               colorbar=dict(title="adds", tickfont=TICK_FONT),
                               hovertemplate="query side: %{y}<br>key side: %{x}<br>adds %{z:+.3f}<extra></extra>"))
    fig.update_layout(height=120 + 34 * len(rows), margin=dict(t=30, b=10),
                      title=f"score {chosen.score:+.3f} = the sum of these cells")
    fig.update_xaxes(title="key side (the stream at the key's position)", tickfont=TICK_FONT, side="bottom")
    fig.update_yaxes(title="query side", tickfont=TICK_FONT, autorange="reversed")
    st.plotly_chart(fig, width="stretch", key=f"{key}_matrix")
    said = [f"the query's **{a}** meeting the key's **{b}** {'adds' if v >= 0 else 'takes away'} {abs(v):.2f}"
            for a, b, v in largest_terms(qa.parts, chosen.terms, 3)]
    st.markdown("Largest terms: " + "; ".join(said) + ".")
    st.caption("How: the vector entering this layer is the embedding plus every earlier attention and MLP output. "
               "Freeze the norms' divisors at this run's values and the head's query and key become sums of one "
               "piece per part (through the norm, the head's weights and the position rotation); the score is then a "
               "sum over every pair of pieces, exactly. Rows and columns beyond the largest six are folded into "
               "“other parts”, so the cells still add up to the score.")


def _node_label(node: Node, tokens: list[str], positions: tuple[int, ...]) -> str:
    if node.kind == "head":
        return f"layer {node.layer} head {node.head} · share {node.share:.2f}"
    if node.kind == "mlp":
        return f"layer {node.layer} MLP · share {node.share:.2f}"
    return f"token ({positions[node.position]}) {tokens[node.position]} · share {node.share:.2f}"


def node_panel(lm: LanguageModel, rec, g, a, target: int, target_name: str, tokens: list[str],
               positions: tuple[int, ...] | None = None) -> None:
    """A picker of the graph's nodes (a click on the graph sets it: views.pages.why_token.graph); the picked one shown
    in place. positions: each window position's place in the whole prompt (default: the same)."""
    nodes = graph_nodes(g)
    if not nodes:
        return
    positions = tuple(range(len(tokens))) if positions is None else positions
    node = left_out(st.selectbox, "why_node_pick", "a node of this run's contribution graph, whose list follows "
                    "the run and its threshold", "a node of the graph (strongest route first)", nodes,
                    format_func=lambda n: _node_label(n, tokens, positions))
    last = len(rec.ids) - 1
    part = direct_part(a, node, last)
    share = f"Strongest route through it: share {node.share:.2f}"
    if node.kind == "head":
        share += (f" (from ({positions[node.source]}) {tokens[node.source]} into ({positions[node.position]}) "
                  f"{tokens[node.position]})")
    if part is not None:
        share += f"; it adds {part:+.3f} to the score of “{target_name}” ({a.logit:.3f}) directly"
    st.markdown(markdown_text(share) + ".")
    up, down = dla.promoted_by(rec, lm, node_vector(rec, lm, node), 8)
    st.caption("What it writes, read through the final norm and the output matrix: the tokens it raises and lowers"
               + (" (a token away from the last position: what its embedding alone would say)."
                  if node.kind == "token" and node.position != last else "."))
    st.dataframe(pd.DataFrame([{"promotes": token_text(lm.tokenizer, u), "by": round(su, 3),
                                "suppresses": token_text(lm.tokenizer, d), "by ": round(sd, 3)}
                               for (u, su), (d, sd) in zip(up, down)]), hide_index=True, width="stretch")
    if node.kind == "head":
        st.markdown("**Why it attends there**")
        qk_panel(lm, rec, node.layer, node.head, node.position, tokens, "why_node_qk")
    c1, c2 = st.columns([1, 2])
    mode = linked(c1.radio, "why_node_mode", choice(iv.MODES), "switch off by", iv.MODES, horizontal=True)
    if c2.button("Ablate this node and run again", key="why_node_ablate"):
        r = ablate_node(lm, list(rec.ids), target, node, mode, clean_logits=rec.logits)
        st.markdown(f"Without it ({mode}): probability of “{markdown_text(target_name)}” {r.prob_before:.1%} → "
                    f"**{r.prob_after:.1%}**, score {r.logit_before:.2f} → {r.logit_after:.2f}. "
                    + (f"The top token changes to “{markdown_text(token_text(lm.tokenizer, r.top_after))}”."
                       if r.answer_changes else "The top token stays the same."))
