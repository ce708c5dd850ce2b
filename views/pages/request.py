"""Request & template: the two JSON styles, then the one text the model really reads."""
import pandas as pd
import streamlit as st

from pipeline.model.model_kind import template_sentence
from pipeline.stages.request import ChatRequest
from pipeline.stages.vendor_bodies import PENALTY_NOTE, repetition_body
from pipeline.stages.template import default_system_prompt, turn_markers
from pipeline.stages.tokens import role_counts
from ui.chips import highlighted_template, legend
from ui.escape import code_span, json_text, markdown_text
from views.chrome.frame import page_header
from views.chrome.navigation import back_next
from views.request.runs import run_for_page
from views.request.session import current_request
from views.server.state import get_model

page_header("Request & template", "Before any maths happens, your conversation is sent as JSON and then flattened into "
                                  "a single text with marker tokens: the chat template.")
lm = get_model()
trace = run_for_page()
req = trace.request
markers = turn_markers(lm.tokenizer)  # '<|im_start|>' and '<|im_end|>' for SmolLM2, read from its template
default_sys = default_system_prompt(lm.tokenizer, ChatRequest(trace.request.messages))

TALL = 520 if len(req.openai["messages"]) > 3 else "content"  # px: a long conversation scrolls in its own box
st.subheader("1. Two ways to send the same conversation")
st.markdown("Chat APIs are stateless: every request carries the full conversation. The two common styles differ in "
            "where the system prompt (standing instructions) goes.")
c1, c2 = st.columns(2)
with c1:
    st.markdown("**OpenAI style**: the system prompt is just the first message, with role `system`.")
    st.code(json_text(req.openai), language="json", wrap_lines=True, height=TALL)
with c2:
    st.markdown("**Anthropic style**: the system prompt is a separate top-level `system` field.")
    st.code(json_text(req.anthropic), language="json", wrap_lines=True, height=TALL)
if req.options.penalized:
    st.caption(PENALTY_NOTE)
    if repetition_body(req.options):
        st.markdown("**vLLM or Hugging Face**: the repetition penalty, beside the OpenAI fields.")
        st.code(json_text(repetition_body(req.options)), language="json")
if not any(msg["role"] == "system" for msg in req.openai["messages"]):
    st.info("This request has no system prompt, so neither body has one. "
            + (f"{markdown_text(trace.dims.name)}'s template fills in its own default, as you can see below. "
               if default_sys is not None else "")
            + "Add one in the sidebar to see both styles place it.")

st.subheader("2. The server accepts it and tracks its state")
st.markdown(f"Request id **`{req.id}`**. Each change of state is stamped with the time since arrival.")
st.dataframe(pd.DataFrame(req.states).rename(columns={"t_s": "seconds after arrival"}), hide_index=True)

if current_request().prompt_format == "plain":
    st.subheader("3. Plain text: one text for the model, no chat template")
    st.markdown("The request is sent as plain text (sidebar): no turn markers and no roles. The model reads the "
                "messages' text as it is, after its start token, and simply continues it, as in pretraining. Special "
                "tokens are boxed in red; grey text was added by the app, not typed by anyone.")
else:
    st.subheader("3. The chat template: one text for the model")
    between = (f" between {code_span(markers.start + 'role')} and {code_span(markers.end)}"
               if markers.start and markers.end else "")
    st.markdown(f"{markdown_text(template_sentence(lm.spec))}" + (f" Each turn is written{between}." if between else "")
                + " Special marker tokens are boxed in red; grey text was added by the template, not typed by anyone.")
special_pieces = sorted({t.text for t in trace.tokens if t.special})
st.markdown(legend(), unsafe_allow_html=True)
st.markdown(highlighted_template(trace.segments, special_pieces), unsafe_allow_html=True)

by_role = pd.DataFrame(list(role_counts(trace.tokens).items()), columns=["role", "tokens"])
added = sum(len(s.text) for s in trace.segments if s.role == "template")
c1, c2, c3 = st.columns(3)
c1.metric("Characters in the whole prompt text", len(trace.prompt_text),
          help="The text the model reads, template and markers included, counted letter by letter"
               + (f": {code_span(markers.start)} alone is {len(markers.start)}" if markers.start else "")
               + ". The Tokens page counts each marker as one character, so its count is lower.")
c2.metric("Characters added by the template", added, help="Counted the same way, markers letter by letter.")
c3.metric("Special marker tokens", sum(t.special for t in trace.tokens))
st.dataframe(by_role, hide_index=True)

if default_sys is not None:
    st.markdown("**Default system prompt.** You gave no system prompt, so the model's template inserted its own:")
    st.code(default_sys, language=None, wrap_lines=True)
    st.caption("It is billed and processed like any other prompt text.")

with st.expander("The segments as data (role of each stretch of text)"):
    st.dataframe(pd.DataFrame([seg.to_json() for seg in trace.segments]), hide_index=True, width="stretch")
with st.expander("The raw rendered text"):
    st.code(trace.prompt_text, language=None)
back_next()
