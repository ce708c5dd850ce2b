"""Journey: the whole request in order, one short section per stage, each with its real data."""
from views.common import current_trace, page_header, stage_link

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from ui.chips import legend, token_chips
from pipeline.text import plural
from ui.escape import html_text, plotly_label

page_header("Journey", "One question, followed from the moment it is sent to the moment the answer is complete. "
                       "Every number below was measured on the real SmolLM2-135M-Instruct for the request in the sidebar.")
trace = current_trace()
m = trace.dims
T, S = len(trace.tokens), len(trace.steps)
rid = trace.request.id


def section(n: int, title: str, what: str) -> None:
    st.subheader(f"{n}. {title}")
    st.markdown(what)


section(1, "The app sends a request", "Your app packs the whole conversation into one JSON body and sends it to the "
        "model provider. Nothing is remembered between calls: earlier turns travel again every time.")
c1, c2 = st.columns([3, 2])
c1.json(trace.request.openai, expanded=True)
with c2:
    st.markdown(f"The server gives it the id **`{html_text(rid)}`** and tracks its state:")
    st.dataframe(pd.DataFrame(trace.request.states).rename(columns={"t_s": "seconds after arrival"}),
                 hide_index=True, width="stretch")
stage_link("views/request_template.py", "Request & template: both JSON styles", "📨")

section(2, "The chat template and the tokenizer", f"The messages are written into one long text with marker tokens "
        f"around each turn, then cut into **{T} tokens**. Grey parts were added by the template, green is your "
        f"question; the small number on each chip is the token id the model actually receives.")
st.markdown(legend(), unsafe_allow_html=True)
st.markdown(token_chips(trace.tokens), unsafe_allow_html=True)
stage_link("views/tokens.py", "Tokens: chips, other tokenizers, try your own text", "🔤")

section(3, "A place in a batch", "A GPU server runs many requests together. This request gets one row in the next batch.")
c1, c2 = st.columns(2)
c1.json({"batch": [trace.batch["entry"]]})
single = trace.batch["single"]
c2.markdown("The row becomes three integer tensors:")


def first_values(row: list, n: int = 8) -> str:
    """[1, 2, 3] -> '[1, 2, 3]'; a row longer than n -> its first n values and '…': '[1, 2, …]'."""
    return str(row) if len(row) <= n else str(row[:n])[:-1] + ", …]"


c2.dataframe(pd.DataFrame([{"tensor": k, "shape (B, T)": str(v["shape"]), "dtype": v["dtype"],
                            "first values": first_values(v["values"][0])} for k, v in single.items()]),
             hide_index=True, width="stretch")
stage_link("views/tensors_batch.py", "Tensors & batch: padding several requests into one rectangle", "🧮")

section(4, "Prefill: the prompt goes through the model once", f"Each token id picks one row of {m.D} numbers "
        f"from the embedding table. These rows then pass through {m.L} layers; each layer mixes in information "
        f"from earlier tokens (attention) and transforms each token on its own (MLP). The whole prompt is processed in "
        f"one pass that took **{trace.timings.prefill_s:.2f} s** here.")
p = trace.prefill
shapes = [("embeddings", "(T, D)", p.embeddings.shape), ("hidden_states", "(L+1, T, D)", p.hidden_states.shape),
          ("q_rot", "(L, H, T, Dh)", p.q_rot.shape), ("k_rot (stored in the KV cache)", "(L, Hkv, T, Dh)", p.k_rot.shape),
          ("v (stored in the KV cache)", "(L, Hkv, T, Dh)", p.v.shape), ("last_logits", "(V,)", p.last_logits.shape)]
if p.attention is not None:
    shapes.insert(2, ("attention", "(L, H, T, T)", p.attention.shape))
st.dataframe(pd.DataFrame([{"tensor": n, "axes": a, "shape": str(tuple(s))} for n, a, s in shapes]),
             hide_index=True, width="stretch")
kv_prefill = sum(p.kv_bytes_per_layer)
st.markdown(f"After prefill the KV cache holds the keys and values of all {T} prompt tokens in every layer: "
            f"**{kv_prefill:,} bytes** ({m.L} layers × {p.kv_bytes_per_layer[0]:,} B).")
c1, c2, c3 = st.columns(3)
with c1:
    stage_link("views/embeddings.py", "Embeddings", "📍")
    stage_link("views/position_rope.py", "Position (RoPE)", "🌀")
with c2:
    stage_link("views/layers.py", "Layers", "🥞")
    stage_link("views/attention.py", "Attention", "👀")
with c3:
    stage_link("views/kv_cache.py", "KV cache", "🗄️")

section(5, "The first token is chosen", f"The last position's vector is scored against all {m.V:,} "
        "vocabulary entries (logits), and the scores become probabilities. These are the real top candidates:")
if S:
    first = trace.steps[0]
    top = first.top[:8]
    fig = go.Figure(go.Bar(x=[t.prob for t in top][::-1],
                           y=[plotly_label(f"({i}) {t.text}") for i, t in enumerate(top)][::-1],
                           orientation="h", hovertext=[plotly_label(f"id {t.id} · logit {t.logit}") for t in top][::-1],
                           marker_color=["#16a34a" if t.id == first.token_id else "#94a3b8" for t in top][::-1]))
    fig.update_layout(height=300, margin=dict(l=10, r=10, t=30, b=10), xaxis_title="probability (over V)",
                      yaxis_title="candidate token", title=plotly_label(f"chosen: {first.token_text} (id {first.token_id})"))
    st.plotly_chart(fig, width="stretch")
stage_link("views/next_token.py", "Next token: temperature, top-k, top-p, draws", "🎲")

section(6, "Streaming: one small event per token", f"The chosen token is turned back into text and sent to your screen "
        f"right away. The first one arrived after **{trace.timings.ttft_s:.2f} s** (time to first token); the "
        f"model then fed each new token back in and produced {plural(S, 'token')} in all. A token that is only part "
        f"of a character (Korean, emoji) sends no text until the character is complete, and the end token sends "
        f"none, so there can be fewer `text_delta` events than tokens.")
deltas = [e for e in trace.events if e["event"] == "text_delta"]
c1, c2 = st.columns(2)
c1.json(deltas[:3], expanded=True)
with c2:
    tpot = trace.timings.tpot_s
    st.metric("Time to first token (TTFT)", f"{trace.timings.ttft_s:.2f} s")
    st.metric("Time per output token (TPOT)", f"{tpot * 1000:.0f} ms" if tpot else "—")
    st.metric("text_delta events", len(deltas))
stage_link("views/generation.py", "Generation: replay the stream, timeline", "⏩")

section(7, "Done: the completed event and clean-up", f"Generation stopped because of **{trace.finish_reason}** "
        f"({'the model chose its end-of-turn token' if trace.finish_reason == 'eos' else 'the token limit was reached' if trace.finish_reason == 'length' else 'a stop string appeared'}). "
        f"The server sends a final event, records usage, and frees the request's KV cache "
        f"({trace.cleanup.kv_bytes_released:,} bytes for {trace.cleanup.kv_tokens_released} tokens: the prompt and every "
        f"chosen token but the last, which is never fed back).")
completed = trace.events[-1]
st.json(completed, expanded=1)
st.caption(f"This run took {plural(S, 'forward pass', 'forward passes')}: one prefill over the {T}-token prompt, then "
           f"one decode pass for each token that was fed back.")
