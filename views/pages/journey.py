"""Journey: the whole request in order, one short section per stage, each with its real data."""
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.costs.named_time import tpot, ttft
from pipeline.model.prefill_record import PREFILL_CHUNK, prefill_passes
from pipeline.stages.commitment import DEFINITIONS
from pipeline.stages.decode_record import silent_steps
from pipeline.text.pieces import token_pieces
from pipeline.text.readable import render_bytes
from pipeline.text.unfinished import continuation_label, unfinished_end
from ui.chips import legend, token_chips
from ui.commitment import strip_html
from ui.escape import code_span, html_text, json_text, markdown_text, plotly_label
from ui.plots import TICK_FONT
from ui.words import first_values, plural
from views.chrome.frame import page_header, stage_link
from views.chrome.navigation import architecture_map, back_next, page_href
from views.links.controls import link_name
from views.request.model_kind_note import base_model_note
from views.request.runs import run_for_page
from views.request.session import current_request
from views.server.commitment import kept_commitment, run_commitment
from views.server.state import get_model

page_header("Journey", "One question, followed from the moment it is sent to the moment the answer is complete. "
                       f"Every number below was measured on the real {markdown_text(get_model().name)} "
                       "for the request in the sidebar.")
trace = run_for_page()
tok = get_model().vocabulary  # token names: enough to draw, and ready before the network loads
m = trace.dims
T, S = len(trace.tokens), len(trace.steps)
rid = trace.request.id
with st.expander("The model this request goes through, part by part (each part opens its page)", expanded=True):
    architecture_map(dims=m)


PATHS_HELP = (" The captured run records every layer's tensors for these pages: slower than the plain serving "
              "path. Generation measures both, side by side.")


def section(n: int, title: str, what: str) -> None:
    st.subheader(f"{n}. {title}")
    st.markdown(what)


section(1, "The app sends a request", "Your app packs the whole conversation into one JSON body and sends it to the "
        "model provider. Nothing is remembered between calls: earlier turns travel again every time.")
c1, c2 = st.columns([3, 2])
c1.code(json_text(trace.request.openai), language="json", wrap_lines=True,  # a long conversation scrolls in its box
        height=420 if len(trace.request.openai["messages"]) > 3 else "content")
with c2:
    st.markdown(f"The server gives it the id **`{html_text(rid)}`** and tracks its state:")
    st.dataframe(pd.DataFrame(trace.request.states).rename(columns={"t_s": "seconds after arrival"}),
                 hide_index=True, width="stretch")
stage_link("views/pages/request.py", "Request & template: both JSON styles", "📨")

if current_request().prompt_format == "plain":
    section(2, "Plain text and the tokenizer", "The request is sent as plain text (sidebar): the messages' text as "
            "it is, with no chat template and no turn markers, after the model's start token if it has one, then cut "
            f"into **{plural(T, 'token')}**. Grey parts were added by the app, green is your question; the small "
            "number on each chip is the token id the model actually receives.")
else:
    section(2, "The chat template and the tokenizer", f"The messages are written into one long text with marker "
            f"tokens around each turn, then cut into **{plural(T, 'token')}**. Grey parts were added by the template, "
            f"green is your question; the small number on each chip is the token id the model actually receives.")
st.markdown(legend(), unsafe_allow_html=True)
st.markdown(token_chips(trace.tokens, pieces=token_pieces(tok, trace.ids), shown=160), unsafe_allow_html=True)
stage_link("views/pages/tokens.py", "Tokens: chips, other tokenizers, try your own text", "🔤")

section(3, "A place in a batch",
        "A GPU server runs many requests together. This request gets one row in the next batch.")
c1, c2 = st.columns(2)
c1.code(json_text({"batch": [trace.batch["entry"]]}), language="json", wrap_lines=True)
single = trace.batch["single"]
c2.markdown("The row becomes three integer tensors:")


c2.dataframe(pd.DataFrame([{"tensor": k, "shape (B, T)": str(v["shape"]), "dtype": v["dtype"],
                            "first values": first_values(v["values"][0])} for k, v in single.items()]),
             hide_index=True, width="stretch")
stage_link("views/pages/tensors.py", "Tensors & batch: padding several requests into one rectangle", "🧮")

section(4, "Prefill: the prompt goes through the model once", f"Each token id picks one row of {m.D} numbers "
        f"from the embedding table. These rows then pass through {m.L} layers; each layer mixes in information "
        f"from earlier tokens (attention) and transforms each token on its own (MLP). "
        + (f"The whole prompt is processed in one pass that took **{trace.timings.prefill_s:.2f} s** here."
           if prefill_passes(T) == 1 else
           f"This long prompt is processed in {prefill_passes(T)} passes of up to {PREFILL_CHUNK} tokens, each reading "
           f"the keys and values the earlier ones stored; together they took "
           f"**{trace.timings.prefill_s:.2f} s** here."))
p = trace.prefill
shapes = [("embeddings", "(T, D)", p.embeddings.shape), ("hidden_states", "(L+1, T, D)", p.hidden_states.shape),
          ("q_rot", "(L, H, T, Dh)", p.q_rot.shape),
          ("k_rot (stored in the KV cache)", "(L, Hkv, T, Dh)", p.k_rot.shape),
          ("v (stored in the KV cache)", "(L, Hkv, T, Dh)", p.v.shape), ("last_logits", "(V,)", p.last_logits.shape)]
if p.attention is not None:
    shapes.insert(2, ("attention", "(L, H, T, T)", p.attention.shape))
st.dataframe(pd.DataFrame([{"tensor": n, "axes": a, "shape": str(tuple(s))} for n, a, s in shapes]),
             hide_index=True, width="stretch")
kv_prefill = sum(p.kv_bytes_per_layer)
st.markdown(f"After prefill the KV cache holds the keys and values of all {plural(T, 'prompt token')} in every layer: "
            f"**{kv_prefill:,} bytes** ({m.L} layers × {p.kv_bytes_per_layer[0]:,} B).")
c1, c2, c3 = st.columns(3)
with c1:
    stage_link("views/pages/embeddings.py", "Embeddings", "📍")
    stage_link("views/pages/position.py", "Position (RoPE)", "🌀")
with c2:
    stage_link("views/pages/layers/page.py", "Layers", "🥞")
    stage_link("views/pages/attention/page.py", "Attention", "👀")
with c3:
    stage_link("views/pages/kv_cache/page.py", "KV cache", "🗄️")

section(5, "The first token is chosen", f"The last position's vector is scored against all {m.V:,} "
        "vocabulary entries (logits), and the scores become probabilities. These are the real top candidates:")
answer = token_pieces(tok, trace.generated_token_ids)  # the answer's tokens placed in their characters
if S:
    first = trace.steps[0]
    top = first.top[:8]
    names = [continuation_label(tok, trace.ids, t.id) for t in top]  # '<0xED> (byte 1 of 3)' for a part
    fig = go.Figure(go.Bar(x=[t.prob for t in top][::-1],
                           y=[plotly_label(f"({i}) {n}") for i, n in enumerate(names)][::-1],
                           orientation="h", hovertext=[plotly_label(f"id {t.id} · logit {t.logit}") for t in top][::-1],
                           marker_color=["#16a34a" if t.id == first.token_id else "#94a3b8" for t in top][::-1]))
    fig.update_layout(height=340, margin=dict(l=10, r=10, t=40, b=10), xaxis_title="probability (over V)",
                      yaxis_title="candidate token", font=dict(size=13),
                      title=plotly_label(f"chosen: {answer[0].with_bytes} (id {first.token_id})"))
    fig.update_yaxes(tickfont=TICK_FONT)
    st.plotly_chart(fig, width="stretch")
    if answer[0].partial:
        st.caption(f"The first token is only part of a character: byte{'s' if len(answer[0].raw) > 1 else ''} "
                   f"{code_span(answer[0].text)} {'are' if len(answer[0].raw) > 1 else 'is'} part {answer[0].part} "
                   f"of {answer[0].parts} of {code_span(answer[0].group_text)}, which the next "
                   f"{plural(answer[0].parts - answer[0].part, 'token')} complete.")
stage_link("views/pages/next_token/page.py", "Next token: temperature, top-k, top-p, draws", "🎲")

section(6, "Streaming: one small event per token", f"The chosen token is turned back into text and sent to your screen "
        f"right away. The first one arrived after **{ttft(trace).shown}** ({ttft(trace).label}: time to first "
        f"token); the "
        f"model then fed each new token back in and produced {plural(S, 'token')} in all. A token that is only part "
        f"of a character (Korean, emoji) sends no text until the character is complete, and the end token sends "
        f"none, so there can be fewer `text_delta` events than tokens.")
base_model_note()
deltas = [e for e in trace.events if e["event"] == "text_delta"]
silent = silent_steps(S, deltas, answer, trace.finish_reason)  # steps that sent no text, by reason
if S != len(deltas):
    why = []
    if silent["character"]:
        why.append(f"{plural(len(silent['character']), 'token')} {'was' if len(silent['character']) == 1 else 'were'} "
                   "an unfinished part of a character and waited for the rest")
    if silent["end"]:
        why.append("the end token sends no text")
    if silent["other"]:
        why.append(f"{plural(len(silent['other']), 'token')} waited for the next one (text that could begin a stop "
                   "string, or that the next token changes)")
    extra = len(deltas) - (S - sum(map(len, silent.values())))
    st.info(f"{plural(S, 'token')} but {plural(len(deltas), '`text_delta` event')}: " + "; ".join(why)
            + (" (the last event sends what was held back at the end)" if extra > 0 else "") + ".")
c1, c2 = st.columns(2)
c1.code(json_text(deltas[:3]), language="json", wrap_lines=True)
with c2:
    first, per_token = ttft(trace), tpot(trace)
    st.metric(first.label, first.shown, help=first.help + PATHS_HELP)
    st.metric(per_token.label if per_token else "TPOT", per_token.shown if per_token else "—",
              help=(per_token.help if per_token else "One token: no gap between tokens.") + PATHS_HELP)
    st.metric("text_delta events", len(deltas))
stage_link("views/pages/generation/page.py", "Generation: replay the stream, timeline", "⏩")


def decided_strip() -> None:
    """The commitment strip, compact (Layers draws it whole): each answer token shaded by the first layer from which
    the logit lens keeps it as its top-1; a token opens the lens at its position on Layers."""
    st.markdown("**Where each answer token was decided**")
    c = kept_commitment(trace.ids, trace.generated_token_ids)
    slot = st.empty()  # the button, cleared in the run it starts: the strip takes its place
    if c is None and not slot.button("Show where each answer token was decided (one more pass of the model)",
                                     key="jo_commit_go"):
        return
    slot.empty()
    if c is None:
        c = run_commitment(trace.ids, trace.generated_token_ids)
    rule = next(iter(DEFINITIONS))  # top-1 from then on: Layers' default, where the other two are offered
    layers = page_href("layers")  # the sidebar's request in it: Layers opens on this very run
    lens_at = f"{layers}{'&' if '?' in layers else '?'}{link_name('ly_commit_token')}="
    st.markdown(strip_html([p.label for p in answer], c.layers[rule], c.probs[-1], m.L, shown=SHOWN_COMPACT,
                           hrefs=[f"{lens_at}{j}" for j in range(S)]), unsafe_allow_html=True)
    st.caption(f"Shaded by the first layer from which the logit lens keeps the token as its top-1 through the last "
               f"layer ({m.L}): darker blue settled earlier, amber only at the last layer, red never. \"Decided\" is "
               "a choice of definition; Layers offers two more. Click a token for the lens at its position there.")


SHOWN_COMPACT = 80  # Journey's strip: chips before the rest fold
if S:
    decided_strip()

WHY_STOPPED = {"eos": "the model chose its end-of-turn token", "length": "the token limit was reached"}
section(7, "Done: the completed event and clean-up", f"Generation stopped because of **{trace.finish_reason}** "
        f"({WHY_STOPPED.get(trace.finish_reason, 'a stop string appeared')}). "
        f"The server sends a final event, records usage, and frees the request's KV cache "
        f"({trace.cleanup.kv_bytes_released:,} bytes for {plural(trace.cleanup.kv_tokens_released, 'token')}: the "
        f"{plural(T, 'prompt token')} and every chosen token but the last, which is never fed back"
        + (f": {T:,} + {S:,} − 1)." if trace.cleanup.kv_tokens_released == T + S - 1 else ")."))
completed = trace.events[-1]
cut = unfinished_end(tok, trace.generated_token_ids) if trace.finish_reason == "length" else b""
if cut:
    st.info(f"The answer was cut: the token limit fell inside a character. The "
            f"{plural(len(cut), 'byte')} it had begun with ({code_span(render_bytes(cut))}) were never sent, so the "
            "text ends on the last whole character instead of '�'.", icon="✂️")
st.code(json_text(completed), language="json", wrap_lines=True)
chunks = prefill_passes(T)  # long prompts: prefill in chunks


def fed_back(steps: int) -> str:
    """The decode passes after the prefill, in words: every chosen token but the last is fed back once."""
    if steps <= 1:
        return ", and no decode pass: the one token chosen is never fed back" if steps else ""
    if steps == 2:
        return ", then one decode pass for the first chosen token, fed back"
    return f", then one decode pass for each of the {steps - 1:,} tokens fed back"


st.caption(f"This run took {plural(S - 1 + chunks, 'forward pass', 'forward passes')}: "
           + ("one prefill" if chunks == 1 else f"a prefill in {chunks} chunks of up to {PREFILL_CHUNK} tokens")
           + f" over the {T:,}-token prompt" + fed_back(S) + ".")
back_next()
