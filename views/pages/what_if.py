"""What if: take the answer another way at any step, and walk the tree of branches you explored."""
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.core.errors import InputError
from pipeline.run.statistics import log_probability, mean_log_probability, step_log_probabilities
from pipeline.stages.tokens import encode
from pipeline.text.pieces import spelled, token_pieces
from pipeline.text.unfinished import continuation_label, unfinished_end
from ui.escape import code_span, markdown_text, plotly_label
from ui.words import plural
from views.chrome.frame import end_page, page_header
from views.chrome.navigation import back_next
from views.links import url_state
from views.links.controls import declare, left_out, linked
from views.links.params import integer, text
from views.request.branching import branch_for, branch_label
from views.request.runs import run_for_page
from views.request.session import current_request, request_key
from views.server.state import get_model

page_header("What if", "Pick any step of the answer and any other token: the model continues from there with that "
            "token forced. The prompt is not run again — its keys and values come back from the captured run — "
            "and the answer so far is fed once, so a branch costs a fraction of a new request.")
original = run_for_page(original=True)
tok = get_model().tokenizer
root = request_key(current_request())
tree = st.session_state.setdefault("branch_tree", {})  # {request key: [paths explored]}
paths = tree.setdefault(root, [()])
shown = st.session_state.get("branch_shown")
here = shown[1] if shown and shown[0] == root else ()

st.subheader("1. Where to branch")
base = branch_for(original, here) if here else original
st.caption(f"Branching from: **{markdown_text(branch_label(here, original))}**.")
S = len(base.steps)
declare("br_step", integer(0, 4096))  # here: a link's step, then kept in this run's range
url_state.keep_in_range("br_step", 0, max(S - 1, 1))
step = st.slider("step of the answer", 0, max(S - 1, 1), min(st.session_state.get("br_step", 0), S - 1), key="br_step",
                 disabled=S < 2) if S > 1 else 0
pieces = token_pieces(tok, base.generated_token_ids)  # the answer's tokens placed in their characters ('토 (1/3)')
context = list(base.ids) + base.generated_token_ids[:step]  # what the model had read before this step
st.code(f"answer so far: {spelled(pieces, step) or '(nothing yet)'}\nthe run chose: {pieces[step].with_bytes}",
        language=None, wrap_lines=True)
top = base.steps[step].top
options = {f"{continuation_label(tok, context, c.id)}  (id {c.id}, {c.prob:.1%})": c.id
           for c in top if c.id != base.steps[step].token_id}
c1, c2 = st.columns([2, 1])
pick = linked(c1.selectbox, "br_pick", text(400), "another candidate at this step", list(options))
typed = linked(c2.text_input, "br_typed", text(40), "…or type a token's text", "", max_chars=40,
               help="Its first token is used; leading spaces matter (' fruit' ≠ 'fruit').")
token_id = options[pick]
if typed:
    ids = encode(tok, typed)
    if ids:
        token_id = ids[0]
        st.caption(f"{code_span(typed)} starts with token {code_span(continuation_label(tok, context, token_id))} "
                   f"(id {token_id}).")
if st.button("Continue from here with this token", type="primary", key="br_go"):
    new = here + ((step, int(token_id)),)
    try:
        branch_for(original, new)
    except InputError as e:
        st.error(f"Please fix the branch — {markdown_text(e)}")
        end_page()
    if new not in paths:
        paths.append(new)
    st.session_state.branch_shown = (root, new)
    st.session_state.br_tree = paths.index(new)  # the tree's radio keeps its own choice: move it too
    st.rerun()


def finish(t) -> str:
    """'length, cut inside a character' when the token limit fell between a character's bytes."""
    cut = t.finish_reason == "length" and unfinished_end(tok, t.generated_token_ids)
    return f"{t.finish_reason}, cut inside a character (its bytes never sent)" if cut else t.finish_reason


if here:
    b, parent = branch_for(original, here), (branch_for(original, here[:-1]) if len(here) > 1 else original)
    parted_at = here[-1][0]  # the step where this branch leaves its parent
    st.subheader("2. The two paths side by side")
    c1, c2 = st.columns(2)
    for col, title, t in ((c1, "before this branch", parent), (c2, "this branch", b)):
        p = token_pieces(tok, t.generated_token_ids)
        col.markdown(f"**{title}** — from step {parted_at} on: **{mean_log_probability(t, parted_at):.2f} per "
                     f"token** over {plural(len(t.steps) - parted_at, 'token')} (finish: {finish(t)}; whole path "
                     f"{log_probability(t):.2f} over {plural(len(t.steps), 'token')})")
        col.code(spelled(p, parted_at) + " ⟨" + p[parted_at].label + "⟩ " + spelled(p[parted_at + 1:]),
                 language=None, wrap_lines=True)
    st.caption("⟨ ⟩ marks the step where the paths part. Both paths are the same up to there, so they are compared "
               "from that step on, per token: the mean of log P(chosen token) over each path's own tokens "
               "(temperature 1, over the whole vocabulary); closer to 0 = the model found the path more likely. "
               "A total is not compared: it grows more negative with every token, so a longer path always looks "
               "less likely.")
    lp = step_log_probabilities(b)
    b_pieces = token_pieces(tok, b.generated_token_ids)
    fig = go.Figure(go.Bar(x=[plotly_label(f"({i}){p.label}") for i, p in enumerate(b_pieces)], y=lp,
                           marker_color=["#dc2626" if s.forced else "#0ea5e9" for s in b.steps]))
    fig.update_layout(height=280, margin=dict(t=20, b=10), yaxis_title="log P(chosen token)",
                      xaxis_title="step of this branch (red = forced)")
    st.plotly_chart(fig, width="stretch", key="br_lp")
else:
    st.subheader("2. The two paths side by side")
    st.info("Pick a step and another token above, then continue: the original answer and the branch appear "
            "here side by side, each with how likely the model found the whole path.", icon="🌿")

st.subheader("3. The branches you explored")
st.caption("Every branch is a full run: choose one to show it on every page (Journey, Generation, KV cache, …).")
rows = [{"branch": branch_label(p, original), "depth": len(p)} for p in paths]
choice = left_out(st.radio, "br_tree", "the branches explored in this session: a link cannot make them again",
                  "show on every page", range(len(paths)), index=paths.index(here) if here in paths else 0,
                  format_func=lambda i: ("  " * rows[i]["depth"]) + ("↳ " if rows[i]["depth"] else "")
                  + markdown_text(rows[i]["branch"]))
if paths[choice] != here:
    st.session_state.branch_shown = (root, paths[choice]) if paths[choice] else None
    st.rerun()
st.dataframe(pd.DataFrame(rows), hide_index=True)
back_next()
