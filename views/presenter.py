"""Presenter mode: the request's life in 13 screens, large type, ← / → to move, for a projector.

Every screen shows the real data of the sidebar's request and links into its full page. Learners
follow the same request from the link (and QR code) on the first and last screens.
"""
import io
import json
from urllib.parse import urlencode

import numpy as np
import plotly.graph_objects as go
import segno
import streamlit as st

from pipeline.stages.next_token import filter_stages
from pipeline.text import plural
from ui.chips import highlighted_template, token_chips
from ui.escape import axis_labels, code_span, plotly_label
from views import url_state
from views.common import current_trace, prompt_cache_conversation, stage_link

STAGES = [  # (title, full page)
    ("The request", "views/request_template.py"),
    ("The chat template", "views/request_template.py"),
    ("Tokens", "views/tokens.py"),
    ("Batch tensors", "views/tensors_batch.py"),
    ("Embedding lookup", "views/embeddings.py"),
    ("Through every layer", "views/layers.py"),
    ("Attention", "views/attention.py"),
    ("Logits: a score for every token", "views/next_token.py"),
    ("Sampling", "views/next_token.py"),
    ("Detokenize and stream", "views/generation.py"),
    ("The decode loop and the KV cache", "views/kv_cache.py"),
    ("The end token and clean-up", "views/generation.py"),
    ("The next request: prompt caching", "views/prefix_cache.py"),
]
N = len(STAGES)
BIG = """<style>
[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], header[data-testid="stHeader"] {display: none;}
.block-container {padding-top: 1.5rem; max-width: 1500px;}
.stMarkdown p, .stMarkdown li {font-size: 1.55rem; line-height: 1.45;}
h1 {font-size: 3rem !important;}
</style>"""
st.markdown(BIG, unsafe_allow_html=True)  # a fixed style sheet: no user text in it

st.session_state.setdefault("pr_stage", 1)
stage = min(max(int(st.session_state.pr_stage), 1), N)


def go_to(n: int) -> None:
    st.session_state.pr_stage = min(max(n, 1), N)


trace = current_trace()
m, T, S = trace.dims, len(trace.tokens), len(trace.steps)
title, full_page = STAGES[stage - 1]
nav = st.columns([1, 6, 1])
nav[0].button("← previous", on_click=go_to, args=(stage - 1,), disabled=stage == 1, shortcut="ArrowLeft",
              key="pr_prev", use_container_width=True)
nav[1].progress(stage / N, text=f"Stage {stage} of {N}")
nav[2].button("next →", on_click=go_to, args=(stage + 1,), disabled=stage == N, shortcut="ArrowRight",
              key="pr_next", use_container_width=True)
st.title(f"{stage}. {title}")


def big_chart(fig: go.Figure, height: int = 480) -> None:
    fig.update_layout(height=height, font=dict(size=18), margin=dict(l=10, r=10, t=40, b=10))
    st.plotly_chart(fig, width="stretch")


def learner_link() -> str:
    """A link to the Journey page with this request (no presenter controls) for learners to open."""
    base = (st.context.url or "").split("?")[0].rsplit("/", 1)[0]
    params = {k: v for k, v in st.query_params.items() if k in url_state.REQUEST}
    return f"{base}/journey" + (f"?{urlencode(params)}" if params else "")


def show_link() -> None:
    link = learner_link()
    c1, c2 = st.columns([3, 1])
    c1.markdown("**Follow along on your own laptop** — this link opens the same request:")
    c1.code(link, language=None, wrap_lines=True)
    png = io.BytesIO()
    segno.make(link, error="m").save(png, kind="png", scale=6, border=2)
    c2.image(png.getvalue(), caption="the same link as a QR code", width=220)


if stage == 1:
    st.markdown("An app sends the **whole conversation** as one JSON body. Nothing is remembered between calls.")
    st.code(json.dumps(trace.request.openai, ensure_ascii=False, indent=1), language="json", wrap_lines=True)
    show_link()
elif stage == 2:
    st.markdown(f"The server writes the messages into **one text** with marker tokens: "
                f"{len(trace.prompt_text):,} characters.")
    st.markdown(highlighted_template(trace.segments, sorted({t.text for t in trace.tokens if t.special})),
                unsafe_allow_html=True)
elif stage == 3:
    st.markdown(f"The tokenizer cuts that text into **{plural(T, 'token')}**; the model only ever sees the ids.")
    st.markdown(token_chips(trace.tokens), unsafe_allow_html=True)
elif stage == 4:
    single = trace.batch["single"]
    st.markdown(f"The ids become tensors of shape (B, T) = (1, {T}).")
    for name, v in single.items():
        row = v["values"][0]
        st.markdown(f"**`{name}`** {v['shape']} — `{row[:12]}{' …' if len(row) > 12 else ''}`")
elif stage == 5:
    E = trace.prefill.embeddings[-min(T, 16):, :64].astype(np.float32)  # (≤16, 64) a corner of (T, D)
    st.markdown(f"Each id picks its row of **D = {m.D} numbers** from a table of V = {m.V:,} rows. "
                "The last 16 tokens, first 64 numbers:")
    labels = axis_labels([t.text for t in trace.tokens])[-len(E):]
    big_chart(go.Figure(go.Heatmap(z=E, y=labels, colorscale="RdBu", zmid=0)).update_yaxes(autorange="reversed"))
elif stage == 6:
    norms = np.linalg.norm(trace.prefill.hidden_states[:, -1].astype(np.float32), axis=-1)  # (L+1,)
    st.markdown(f"The vectors pass through **L = {m.L} blocks**; each adds attention's and the MLP's "
                "changes. The last token's vector grows as it goes up:")
    big_chart(go.Figure(go.Scatter(y=norms, mode="lines+markers")).update_layout(
        xaxis_title="after block (0 = embedding)", yaxis_title="length of the last token's vector"))
elif stage == 7:
    from pipeline.stages.attention import attention_for_layer

    layer, head = m.L // 2, 0
    W = min(T, 24)
    A = attention_for_layer(trace.prefill, layer, first_row=T - W)[head][:, T - W:]  # (W, W)
    st.markdown(f"Each token reads from the tokens before it. Layer {layer}, head {head}, the last {W} tokens "
                "(rows: the token looking; columns: the token looked at):")
    labels = axis_labels([t.text for t in trace.tokens])[T - W:]
    big_chart(go.Figure(go.Heatmap(z=np.where(np.triu(np.ones((W, W)), 1) > 0, np.nan, A), x=labels, y=labels,
                                   colorscale="Blues", zmin=0)).update_yaxes(autorange="reversed"), 600)
elif stage == 8:
    top = trace.steps[0].top[:8]
    st.markdown(f"The last position is scored against **all {m.V:,} tokens**; softmax turns scores into "
                "probabilities. The best candidates for the first answer token:")
    big_chart(go.Figure(go.Bar(x=[c.prob for c in top][::-1], y=[plotly_label(c.text) for c in top][::-1],
                               orientation="h")).update_layout(xaxis_tickformat=".0%"))
elif stage == 9:
    o = trace.request.options
    stages = filter_stages(trace.step_logits[0], o)
    st.markdown(f"This run used temperature {o.temperature}, top-k {o.top_k}, top-p {o.top_p}, min-p {o.min_p}"
                + (" — greedy: always the favourite." if o.greedy else "."))
    st.markdown(" → ".join(f"**{s.name}**: {plural(s.kept, 'candidate')}" for s in stages))
    st.markdown(f"Chosen: **{code_span(trace.steps[0].token_text)}** (id {trace.steps[0].token_id}).")
elif stage == 10:
    deltas = [e for e in trace.events if e["event"] == "text_delta"]
    st.markdown(f"Each chosen token is turned back into text and sent at once: {plural(len(deltas), 'event')} "
                f"for {plural(S, 'token')}. First token after **{trace.timings.ttft_s:.2f} s**.")
    st.code(trace.text or "(empty answer)", language=None, wrap_lines=True)
elif stage == 11:
    st.markdown(f"Each new token is fed back; the KV cache keeps every earlier token's keys and values, so only "
                f"the new one goes through the model. {m.kv_bytes(1):,} bytes per token:")
    big_chart(go.Figure(go.Scatter(y=[s.kv_cache_bytes / 2**20 for s in trace.steps], mode="lines+markers"))
              .update_layout(xaxis_title="decode step", yaxis_title="KV cache (MiB)"))
elif stage == 12:
    why = {"eos": "the model chose its end token", "length": "the token limit was reached",
           "stop": "a stop string appeared"}[trace.finish_reason]
    st.markdown(f"It stopped because **{why}**. The server sends a `completed` event with the usage "
                f"({trace.usage.prompt_tokens} prompt + {trace.usage.completion_tokens} completion tokens) and frees "
                f"**{trace.cleanup.kv_bytes_released:,} bytes** of KV cache.")
    st.code(json.dumps(trace.events[-1], ensure_ascii=False, indent=1), language="json", wrap_lines=True)
elif stage == 13:
    rows = prompt_cache_conversation()
    st.markdown("The next request resends the whole conversation. A prompt cache keeps the keys and values of a "
                "start it has seen, so only the new part is computed:")
    for r in rows:
        s = r["stats"]
        st.markdown(f"**{r['label']}**: {s['n_tokens']} tokens, **{s['tokens_reused']} reused**, "
                    f"{s['tokens_computed']} computed")
    show_link()

stage_link(full_page, f"Open the full page: {title}", "🔎")
stage_link("views/start.py", "Leave presenter mode", "🚪")
