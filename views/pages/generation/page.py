"""Generation: the answer streamed token by token, with the measured timings."""
import time

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.core.errors import InputError
from pipeline.costs.named_time import tpot, ttft
from pipeline.text.pieces import token_pieces
from ui.escape import axis_labels, json_text, markdown_text
from ui.plots import token_axis
from ui.words import plural
from views.chrome.frame import page_header
from views.chrome.navigation import back_next
from views.links.controls import linked
from views.links.params import choice
from views.pages.generation.branches import branch_section
from views.pages.generation.live_stream import compare_paths, stream_live
from views.request.model_kind_note import base_model_note
from views.request.runs import run_for_page
from views.request.session import current_request
from views.server.reuse_saving import reuse_section
from views.server.state import get_model

page_header("Generation", "The answer is not written all at once. The model picks one token, sends it to you, "
                          "feeds it back in, and repeats until it chooses to stop or hits the limit.")
lm = get_model()
trace = run_for_page()
t = trace.timings
deltas = [e for e in trace.events if e["event"] == "text_delta"]
secs = {s.step: s.seconds for s in trace.steps}
answer = token_pieces(lm.tokenizer, trace.generated_token_ids)  # '토 (1/3)' for part of a character

st.subheader("1. What you would see")
base_model_note()
c1, c2, c3, c4 = st.columns(4)
first, per_token = ttft(trace), tpot(trace)
c1.metric(first.label, first.shown, help=first.help + " Its prompt's pass recorded every layer.")
c2.metric(per_token.label if per_token else "TPOT", per_token.shown if per_token else "—",
          help=(per_token.help if per_token else "One token: no gap between tokens.")
          + " The plain serving path is faster: run it live or compare the two paths below.")
c3.metric("Tokens generated", len(trace.steps))
c4.metric("Finish reason", trace.finish_reason)
if trace.finish_reason == "length":
    st.warning(f"The answer below was cut off: it reached the limit of {trace.request.options.max_new_tokens} new "
               "tokens (finish_reason = length), so it may end mid-sentence. Raise “max new tokens” in the sidebar "
               "to let the model finish.")
SPEEDS = ["recorded", "2× faster", "10× faster", "instant"]
speed = linked(st.select_slider, "gen_speed", choice(SPEEDS), "Replay speed", SPEEDS, value="2× faster")
live_col, replay_col, compare_col = st.columns(3)
live = live_col.button("⚡ Run it live now", type="primary", key="gen_live",
                       help="The model answers again, streamed token by token as it produces them (the plain "
                            "serving path: no captures, the same tokens).")
replay = replay_col.button("▶ Replay the recorded stream", key="gen_replay")
compare = compare_col.button("⏱ Compare the two paths now", key="gen_compare",
                             help="The plain serving path and the captured run on this request, 3 times each, "
                                  "interleaved, 16 tokens each: medians and ranges.")
if compare:
    try:
        compare_paths(current_request())
    except InputError as e:
        st.warning(markdown_text(e))
if live:
    try:
        stream_live(current_request(), per_token)
    except InputError as e:  # a long prompt while the queue is long
        st.warning(markdown_text(e))
elif replay:
    factor = {"recorded": 1.0, "2× faster": 0.5, "10× faster": 0.1, "instant": 0.0}[speed]

    def stream():
        time.sleep(min(t.ttft_s, 5.0) * factor)
        for e in deltas:
            yield e["delta"]
            time.sleep(min(secs.get(e["step"] + 1, 0.0), 2.0) * factor)

    shown, box = "", st.empty()
    for delta in stream():  # plain text, never markdown: '$x$' or '# title' in an answer stays as typed
        shown += delta
        box.code(shown, language=None, wrap_lines=True)
elif trace.text.strip():
    st.code(trace.text, language=None, wrap_lines=True)
else:
    st.caption("(empty answer)")
st.caption("The replay waits the recorded time before each token (capped at 5 s for the first and 2 s for the rest).")

st.subheader("2. The stream as events")
st.markdown("Each token that completes some text is sent as a small `text_delta` event. A token that ends in the "
            "middle of a multi-byte character waits until the character is complete.")
events = [{"step": e["step"], "delta": e["delta"], "token": answer[e["step"]].with_bytes,
           "token id": trace.steps[e["step"]].token_id,
           "ms after the last": round(secs.get(e["step"], 0.0) * 1000)} for e in deltas]  # none: an empty answer
rows = pd.DataFrame(events, columns=["step", "delta", "token", "token id", "ms after the last"])
c1, c2 = st.columns([2, 3])
c1.code(json_text(deltas[:4]), language="json", wrap_lines=True)
token_width = 7 * max((len(e["token"]) for e in events), default=5)  # the column whole: '토 (3/3) · bytes <0xA0>'
c2.dataframe(rows, hide_index=True, width="stretch", height=300,
             column_config={"token": st.column_config.TextColumn(width=token_width)})

st.subheader("3. Prefill vs decode timeline")
st.markdown("Prefill reads the whole prompt in one pass and sets the wait before the first word. Decode then runs "
            "one short pass per new token; each pass re-reads every weight of the model to move one token forward.")
prefill_end = t.ttft_s
fig = go.Figure()
fig.add_trace(go.Bar(y=["request"], x=[prefill_end], base=[0.0], orientation="h", name="queue + prefill",
                     marker_color="#f97316", hovertext=[f"{len(trace.tokens)} prompt tokens, {t.prefill_s:.3f} s of "
                                                        f"model time"], hoverinfo="text+x"))
labels = axis_labels([q.label for q in answer])
if len(trace.steps) > 1:  # the recorded times: the first token at TTFT, the last at the end (TPOT: the mean gap)
    fig.add_trace(go.Bar(y=["request"], x=[t.total_s - prefill_end], base=[prefill_end], orientation="h",
                         name="decode steps", marker_color="#0ea5e9",
                         hovertext=[f"{plural(len(trace.steps) - 1, 'more token')}, {per_token.label} "
                                    f"{per_token.shown}" if per_token else ""], hoverinfo="text+x"))
fig.update_layout(barmode="overlay", height=220, margin=dict(l=10, r=10, t=10, b=10),
                  xaxis_title="seconds since the request arrived", yaxis_title="")
st.plotly_chart(fig, width="stretch")
per_step = go.Figure(go.Bar(x=labels, y=[s.seconds * 1000 for s in trace.steps],
                            marker_color=["#f97316"] + ["#0ea5e9"] * (len(trace.steps) - 1)))
per_step.update_layout(height=320, margin=dict(l=10, r=10, t=40, b=10), yaxis_title="ms for this token",
                       title="The model's time for each token (its pass and the choice; waits between steps left "
                             "out)", font=dict(size=13))
token_axis(per_step, "x", labels, angle=-60, title="generated token (step)")
st.plotly_chart(per_step, width="stretch")
st.caption(f"Model time for prefill: {t.prefill_s:.3f} s for {plural(len(trace.tokens), 'token')}. "
           f"Arrival to the last token: {t.total_s:.2f} s ({first.label} {first.shown}"
           + (f", then {per_token.label} {per_token.shown} on average" if per_token else "") + "). "
           "Timings are measured on this shared CPU and vary from run to run.")
reuse_section(trace, "gen")

st.subheader("4. The end")
why = {"eos": "the model chose its end-of-turn token, which is not shown",
       "length": f"the limit of {trace.request.options.max_new_tokens} new tokens was reached",
       "stop": "a stop string appeared, and the text was cut before it"}[trace.finish_reason]
st.markdown(f"Generation stopped because {why}. The server sends a last `completed` event with the whole text, "
            f"every token id and the usage that is billed, then frees the request's KV cache.")
c1, c2 = st.columns(2)
c1.code(json_text(trace.events[-1]), language="json", wrap_lines=True)
c2.code(json_text({"usage": trace.usage.to_json(), "cleanup": trace.cleanup.__dict__}), language="json",
        wrap_lines=True)
n_prompt, n_answer = trace.usage.prompt_tokens, trace.usage.completion_tokens
c2.caption(f"kv_tokens_released = {trace.cleanup.kv_tokens_released:,}: the {plural(n_prompt, 'prompt token')} and "
           f"every chosen token but the last, which is never fed back"
           + (f" ({n_prompt:,} + {n_answer:,} − 1)." if trace.cleanup.kv_tokens_released == n_prompt + n_answer - 1
              else "."))

branch_section(current_request())

st.caption("How this run shared the model with the rest of the room (the queue's batch, step by step) is on "
           "Prefill & decode, section 6.")
back_next()
