"""Constrained output: the answer decoded under a JSON schema, a regular expression or a choice list."""
import json

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.core.errors import InputError
from pipeline.run.trace import run_constrained_trace
from pipeline.server.run_queue import cost_of
from ui.escape import markdown_text, plotly_label
from views.chrome.frame import end_page, page_header
from views.chrome.navigation import back_next
from views.links.controls import linked
from views.links.params import choice, text
from views.request.session import current_request, request_key
from views.server.state import APP_MAX_PROMPT_TOKENS, get_model
from views.server.waiting import result_through_queue

page_header("Constrained output", "A service that must answer in a fixed format turns the format into a grammar. "
            "At every step the grammar engine (xgrammar, the one vLLM and SGLang use) marks which of the model's "
            "tokens may come next; every other token gets a score of −∞, so it can never be drawn.")
EXAMPLES = {
    "json_schema": json.dumps({"type": "object", "properties": {"fruit": {"type": "boolean"},
                                                                "reason": {"type": "string", "maxLength": 80}},
                               "required": ["fruit", "reason"]}, indent=1),
    "regex": r"(Yes|No), because [a-z ,]{5,60}\.",
    "choice": "fruit, vegetable, both",
}
LABELS = {"json_schema": "JSON schema", "regex": "regular expression", "choice": "choice list (comma-separated)"}
kind = linked(st.radio, "co_kind", choice(list(EXAMPLES)), "format", list(EXAMPLES), format_func=LABELS.get,
              horizontal=True)
with st.form("co_form"):
    spec = linked(st.text_area, f"co_spec_{kind}", text(20_000), LABELS[kind], EXAMPLES[kind],
                  height=160 if kind == "json_schema" else 70, max_chars=20_000)
    go_run = st.form_submit_button("Decode the sidebar's question under this format", type="primary")
if not go_run and "co_last" not in st.session_state:
    st.caption("The sidebar's question and options are used; only the format is added.")
    end_page()
if go_run:
    st.session_state.co_last = (kind, spec)
kind, spec = st.session_state.co_last
try:
    request = current_request()
    grammar = [s.strip() for s in spec.split(",")] if kind == "choice" else spec
    trace = result_through_queue(("constrained", request_key(request), kind, spec),
                   lambda: run_constrained_trace(request, get_model(), kind, grammar, APP_MAX_PROMPT_TOKENS),
                   cost_of(100, request.options.max_new_tokens))
except InputError as e:
    st.error(f"Please fix the format — {markdown_text(e)}")
    end_page()

steps = trace.constraint["steps"]
st.subheader("The answer")
st.code(trace.text or "(empty)", language="json" if kind == "json_schema" else None, wrap_lines=True)
if trace.finish_reason == "length":
    st.warning("The token limit (sidebar: max new tokens) was reached before the format was complete: raise it.")
c1, c2, c3 = st.columns(3)
c1.metric("Tokens generated", len(trace.steps))
c2.metric("Fewest tokens allowed at a step", f"{min(s.allowed for s in steps):,} of {trace.dims.V:,}")
c3.metric("Largest probability removed", f"{max(s.mass_removed for s in steps):.0%}")

st.subheader("Step by step")
labels = [plotly_label(f"({s.step}){t.token_text}") for s, t in zip(steps, trace.steps)]
fig = go.Figure([go.Bar(x=labels, y=[s.allowed for s in steps], name="tokens allowed", marker_color="#0ea5e9"),
                 go.Scatter(x=labels, y=[s.mass_removed for s in steps], name="probability removed", yaxis="y2",
                            mode="lines+markers", marker_color="#dc2626")])
fig.update_layout(height=340, margin=dict(t=50, b=10), yaxis=dict(title="tokens allowed (log)", type="log"),
                  yaxis2=dict(title="probability removed", overlaying="y", side="right", tickformat=".0%",
                              range=[0, 1.05], tickvals=[0, .25, .5, .75, 1]), legend=dict(orientation="h", y=1.2),
                  xaxis_title="step: the token chosen")
st.plotly_chart(fig, width="stretch", key="co_chart")
st.dataframe(pd.DataFrame([{"step": s.step, "chosen": t.token_text, "allowed": s.allowed,
                            "best refused": s.best_refused_text, "probability removed": f"{s.mass_removed:.1%}"}
                           for s, t in zip(steps, trace.steps)]), hide_index=True, width="stretch")
st.caption("'Probability removed' is what the model gave (softmax at temperature 1 over all tokens) to the tokens "
           "the format refused at that step; the rest is scaled back up to 100 % before the draw. At the start of a "
           "JSON answer the model usually wanted to write words, so most of its probability is removed.")
back_next()
