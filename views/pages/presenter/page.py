"""Presenter mode: the request's life screen by screen (stages.py), large type, ← / → to move, for a projector.

Every screen shows the real data of the sidebar's request and links into its full page. "Start presenting" makes
a room (a visit makes none); the first and last screens then show learners a link (and QR code) that follows the
presenter: their page turns to the presenter's stage and request within a few seconds (the stage is kept
server-side per room code). The presenter's browser keeps the room's key (views/pages/presenter/room_key.py), so a
reload or a second tab still presents; a follower whose room is gone is told so.
"""
import time
from functools import partial

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from pipeline.core.errors import InputError
from pipeline.costs.named_time import ttft
from pipeline.server.polls.real import attention_head
from pipeline.server.room import room_store
from pipeline.stages.next_token import filter_stages
from pipeline.text.pieces import token_pieces
from pipeline.text.unfinished import continuation_label
from ui.chips import highlighted_template, token_chips
from ui.escape import axis_labels, code_span, json_text, markdown_text, plotly_label
from ui.words import plural
from views.chrome.frame import end_page, stage_link
from views.chrome.navigation import back_next, sent_as_plain_text, small_map
from views.links import url_state
from views.links.controls import declare, left_out
from views.links.params import integer, presenter_key, room_code
from views.pages.presenter import room_key
from views.pages.presenter.lesson import lesson_controls, lesson_panel, start_lesson
from views.pages.presenter.polls import learner_polls, open_room_poll, presenter_polls
from views.pages.presenter.room import learner_links, not_presenting_yet, present, room_state, watch_room
from views.pages.presenter.stages import STAGES
from views.request.runs import run_for_page
from views.request.samples import branch_controls, draw, room_plan, samples_side_by_side
from views.request.session import TEXT_LIMIT, current_request
from views.server.scenarios import prompt_cache_conversation
from views.server.state import get_model

N = len(STAGES)
FONT = 20  # chart text in px, next to the 1.55rem body text
BIG = """<style>
[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], header[data-testid="stHeader"] {display: none;}
.block-container {padding-top: 1.5rem; max-width: 1500px;}
.stMarkdown p, .stMarkdown li {font-size: 1.55rem; line-height: 1.45;}
h1 {font-size: 3rem !important;}
</style>"""
st.markdown(BIG, unsafe_allow_html=True)  # a fixed style sheet: no user text in it


def go_to(n: int) -> None:
    st.session_state.pr_stage = min(max(n, 1), N)


def request_part(query: dict[str, str]) -> dict[str, str]:
    """A room's query without the screen's own controls (a branching stage's samples): its request's parameters."""
    return {name: value for name, value in query.items() if name in url_state.REQUEST}


def ask_new_question() -> None:
    """The presenter's question box (its form's callback, run before the sidebar's widgets are drawn): a new question
    becomes the request, and the walk starts again at stage 1. An empty or unchanged one changes nothing."""
    ss = st.session_state
    question = (ss.get("pr_question") or "").strip()
    if question and question != ss.get("req_question"):
        ss.req_question = question
        ss.pr_stage = 1


def question_box() -> None:
    """Change the question without leaving presenter mode (the sidebar is hidden here)."""
    with st.expander("Ask another question (the walk starts again at stage 1)", icon="✍️"):
        with st.form("pr_question_form", border=False):
            left_out(st.text_input, "pr_question", "the presenter's question box writes the request's question, which "
                     "the link carries as `q`", "Question", value=st.session_state.get("req_question", ""),
                     max_chars=TEXT_LIMIT)
            st.form_submit_button("Run it", on_click=ask_new_question, type="primary")


ss = st.session_state
# the room's names, as printed in QR codes and docs; the key is read from a link, never written into one
declare("pr_stage", integer(1, N), name="stage")
declare("pr_room", room_code, name="room")
declare("pr_key", presenter_key, name="key", private=True)
declare("pr_follow", room_code, name="follow")
if ss.get("pr_room") and not ss.get("pr_key"):
    # /presenter?room=CODE without the key in the link: a reload or a second tab of the presenter's browser drives
    # it with the key its cookie keeps (views/pages/presenter/room_key.py); any other browser follows it, never
    # drives it
    kept = room_key.kept_key(ss.pr_room)
    if kept and room_store().may_drive(ss.pr_room, kept):
        ss.pr_key, ss.pr_adopt = kept, True
    else:
        named = ss.pop("pr_room")
        if not ss.get("pr_follow"):
            ss.pr_follow = named
            st.info(f"This link names room {named} without its presenter key, so this page follows that room. Its "
                    "presenter drives it from their own browser, or from their private presenter link opened on "
                    "this computer.", icon="🔑")

following = ss.get("pr_follow")
if following:  # a learner following a presenter's room
    room = room_store().room(following, seen=True)
    seen_before = ss.setdefault("pr_seen_rooms", set())
    if room is None:
        st.title("Presenter mode")
        if following in seen_before:  # it was there: the server removed it (left for hours, or its store cleared)
            st.warning(f"Room {following} has ended: this server no longer keeps it. Ask the presenter for the "
                       "link on their screen (a new room has a new code).", icon="🚪")
        else:
            st.warning(f"There is no room {following} on this server: the code may be mistyped, or the room has "
                       "ended. Ask the presenter for the link on their screen. (This page opens the room if it "
                       "appears.)", icon="🔎")
            watch_room(following, None)
        st.button("Stop following", key="pr_unfollow", on_click=lambda: ss.pop("pr_follow", None))
        end_page()
    seen_before.add(following)
    if request_part(room["query"]) != url_state.request_params() and \
            request_part(room["query"]) != ss.get("pr_switched"):
        ss.pr_switched = request_part(room["query"])  # once per request: no loop if one would not apply
        url_state.switch_request(room["query"])
    ss.setdefault("pr_room_questions", set()).add(ss.get("req_question", ""))  # not a learner's own question
    ss.pr_stage = room["stage"]
    watch_room(following, room_state(room))

if ss.pop("pr_adopt", False) and not following:
    # this browser's key took the room up again (a reload, a second tab, Go on presenting): the screen opens where
    # the room is, and its first run takes the room back without a warning (it is the same presenter)
    kept_room = room_store().room(ss.get("pr_room", ""))
    if kept_room is not None:
        ss.pr_stage, ss.pr_take_back = kept_room["stage"], True
        if request_part(kept_room["query"]) != url_state.request_params():
            url_state.switch_request(kept_room["query"])
if not following:
    start_lesson()  # `--lesson FILE`: the room starts at the lesson's first stage
ss.setdefault("pr_stage", 1)
stage = min(max(int(ss.pr_stage), 1), N)
trace = run_for_page()
tok = get_model().tokenizer
m, T, S = trace.dims, len(trace.tokens), len(trace.steps)
title, full_page = STAGES[stage - 1]
code = None
# "Many answers at once" draws the samples its stage's controls ask for: a learner's from the room, the presenter's
# from the lesson's stage shown here (none: the room's defaults); the room carries them to its learners
screen_controls = {} if title != "Many answers at once" else branch_controls(room["query"] if following
                                                                               else lesson_controls(stage))
if following:
    nav = st.columns([6, 1])
    nav[0].progress(stage / N, text=f"Stage {stage} of {N} — following the presenter (room {following}); this "
                                    "page turns with theirs.")
    nav[1].button("Stop following", key="pr_unfollow", width="stretch",
                  on_click=lambda: ss.pop("pr_follow", None))
    if not room["saved"]:
        st.caption("This room is kept in this server's memory only (its room store took no file): a restart of the "
                   "server loses it.")
else:
    params = {**url_state.request_params(), **screen_controls}
    code = present()
    room = room_store().room(code) if code else None
    take_back = ss.pop("pr_take_back", False)
    if (room is not None and room["driver"] != ss.pr_driver and ss.get("pr_sent") == (stage, params)
            and not take_back):
        # someone else holding this room's key moved it; this screen has not moved since: say so, do not undo it
        st.warning(f"At {time.strftime('%H:%M:%S', time.localtime(room['moved_at']))} another screen holding this "
                   "room's key (another tab of yours, or someone else with your presenter link) moved your "
                   f"learners to stage {room['stage']}"
                   + (" with another request" if request_part(room["query"]) != request_part(params) else "")
                   + ". Your screen did not move; "
                   "your next move (or the button) takes the room back.", icon="⚠️")
        st.button("Take the room back", key="pr_take", on_click=lambda: ss.update(pr_take_back=True))
    elif room is not None:
        try:
            saved = room_store().set_stage(code, ss.pr_key, stage, params, ss.pr_driver)
        except PermissionError:  # removed in between: the next run says so and offers a new room
            saved, code = True, None
        ss.pr_sent = (stage, params)
        room = room_store().room(code) if code else None
        if not saved:
            where = code_span(room_store().files.where)
            st.warning(f"This server cannot write to its room store ({where}), so this room lives in its memory "
                       "only: learners on this server follow, learners on another replica of the room do not, and a "
                       "restart of the server forgets it.", icon="💾")
    if code:
        watch_room(code, room_state(room))
    nav = st.columns([1, 6, 1])
    nav[0].button("Previous", on_click=go_to, args=(stage - 1,), disabled=stage == 1, shortcut="ArrowLeft",
                  key="pr_prev", width="stretch")
    nav[1].progress(stage / N, text=f"Stage {stage} of {N}" + (f" — room {code}" if code else ""))
    nav[2].button("Next", on_click=go_to, args=(stage + 1,), disabled=stage == N, shortcut="ArrowRight",
                  key="pr_next", width="stretch")
    if not code:
        not_presenting_yet(N)
    question_box()
    if code:  # the presenter's notes and coming questions: for the holder of the room's key only, never a learner
        lesson_panel(partial(open_room_poll, code, ss.pr_key, stage, params, trace, tok))
st.title(f"{stage}. {title}")
small_map(about=full_page)  # where this stage stands in the model, its parts lit
if following:
    learner_polls(following)
elif code:
    presenter_polls(code, ss.pr_key, stage, params, trace, tok)


def big_chart(fig: go.Figure, height: int = 480) -> None:
    """Chart text as large as a projector needs (Streamlit's theme sets 12 px ticks unless told)."""
    big = dict(size=FONT)
    fig.update_layout(height=height, font=big, margin=dict(l=10, r=10, t=40, b=10))
    fig.update_xaxes(tickfont=big, title_font=big)
    fig.update_yaxes(tickfont=big, title_font=big)
    fig.update_traces(selector=dict(type="heatmap"), colorbar=dict(tickfont=big))
    st.plotly_chart(fig, width="stretch")


if title == "The request":
    st.markdown("An app sends the **whole conversation** as one JSON body. Nothing is remembered between calls.")
    st.code(json_text(trace.request.openai, indent=1), language="json", wrap_lines=True)
    learner_links(following or code, code is not None, stage)
elif title == "The chat template":
    if sent_as_plain_text():  # no template: the text goes as it is (as on Journey)
        st.markdown(f"This request goes as **plain text**: the messages as they are, with no chat template and no "
                    f"turn markers: {len(trace.prompt_text):,} characters.")
    else:
        st.markdown(f"The server writes the messages into **one text** with marker tokens: "
                    f"{len(trace.prompt_text):,} characters.")
    with st.container(height=560 if len(trace.prompt_text) > 1500 else "content"):  # a long prompt scrolls
        st.markdown(highlighted_template(trace.segments, sorted({t.text for t in trace.tokens if t.special})),
                    unsafe_allow_html=True)
elif title == "Tokens":
    st.markdown(f"The tokenizer cuts that text into **{plural(T, 'token')}**; the model only ever sees the ids.")
    st.markdown(token_chips(trace.tokens, pieces=token_pieces(tok, trace.ids), shown=400),
                unsafe_allow_html=True)
elif title == "Batch tensors":
    single = trace.batch["single"]
    st.markdown(f"The ids become tensors of shape (B, T) = (1, {T}).")
    for name, v in single.items():
        row = v["values"][0]
        st.markdown(f"**`{name}`** {v['shape']} — `{row[:12]}{' …' if len(row) > 12 else ''}`")
elif title == "Embedding lookup":
    E = trace.prefill.embeddings[-min(T, 16):, :64].astype(np.float32)  # (≤16, 64) a corner of (T, D)
    st.markdown(f"Each id picks its row of **D = {m.D} numbers** from a table of V = {m.V:,} rows. "
                f"The last {plural(len(E), 'token')}, first {E.shape[1]} numbers:")
    labels = axis_labels([t.text for t in trace.tokens])[-len(E):]
    big_chart(go.Figure(go.Heatmap(z=E, y=labels, colorscale="RdBu", zmid=0)).update_yaxes(autorange="reversed"))
elif title == "Through every layer":
    norms = np.linalg.norm(trace.prefill.hidden_states[:, -1].astype(np.float32), axis=-1)  # (L+1,)
    st.markdown(f"The vectors pass through **L = {m.L} blocks**; each adds attention's and the MLP's "
                "changes. The last token's vector grows as it goes up:")
    big_chart(go.Figure(go.Scatter(y=norms, mode="lines+markers")).update_layout(
        xaxis_title="after block (0 = embedding)", yaxis_title="length of the last token's vector"))
elif title == "Attention":
    from pipeline.stages.attention import attention_for_layer

    layer, head = attention_head(trace)
    W = min(T, 24)
    A = attention_for_layer(trace.prefill, layer, first_row=T - W, window=m.window(layer))[head][:, T - W:]  # (W, W)
    st.markdown(f"Each token reads from the tokens before it. Layer {layer}, head {head}, the last {W} tokens "
                "(rows: the token looking; columns: the token looked at):")
    labels = axis_labels([t.text for t in trace.tokens])[T - W:]
    big_chart(go.Figure(go.Heatmap(z=np.where(np.triu(np.ones((W, W)), 1) > 0, np.nan, A), x=labels, y=labels,
                                   colorscale="Blues", zmin=0)).update_yaxes(autorange="reversed"), 600)
elif title == "Logits: a score for every token":
    top = trace.steps[0].top[:8]
    st.markdown(f"The last position is scored against **all {m.V:,} tokens**; softmax turns scores into "
                "probabilities. The best candidates for the first answer token:")
    names = [continuation_label(tok, trace.ids, c.id) for c in top]  # '<0xED> (byte 1 of 3)' for a part
    big_chart(go.Figure(go.Bar(x=[c.prob for c in top][::-1],
                               y=[plotly_label(f"({i}) {n}") for i, n in enumerate(names)][::-1],
                               orientation="h")).update_layout(xaxis_tickformat=".0%"))
elif title == "Sampling":
    o = trace.request.options
    stages = filter_stages(trace.step_logits[0], o, trace.ids)
    st.markdown(f"This run used temperature {o.temperature}, top-k {o.top_k}, top-p {o.top_p}, min-p {o.min_p}"
                + (" — greedy: always the favourite." if o.greedy else "."))
    st.markdown(" → ".join(f"**{s.name}**: {plural(s.kept, 'candidate')}" for s in stages))
    first = token_pieces(tok, trace.generated_token_ids)[0]  # '토 (1/3)' for part of a character
    st.markdown(f"Chosen: **{code_span(first.with_bytes)}** (id {trace.steps[0].token_id}).")
elif title == "Many answers at once":
    plan = room_plan(screen_controls)
    for note in plan.notes:  # a lesson's control that could not be used: its default is drawn instead
        st.warning(markdown_text(note), icon="📚")
    st.markdown(f"The same request answered **{len(plan.temperatures)} times at once**, in one batch: "
                f"{plan.describe()}. Where they part, the model had more than one likely next token.")
    try:
        samples_side_by_side(draw(current_request(), list(plan.temperatures), plan.seed), "1.3em", 560)
    except InputError as e:  # a long prompt while the queue is long
        st.warning(markdown_text(e))
elif title == "Detokenize and stream":
    deltas = [e for e in trace.events if e["event"] == "text_delta"]
    st.markdown(f"Each chosen token is turned back into text and sent at once: {plural(len(deltas), 'event')} "
                f"for {plural(S, 'token')}. First token after **{ttft(trace).shown}** ({ttft(trace).label}; "
                "the captured run records every layer: the plain serving path is faster).")
    st.code(trace.text or "(empty answer)", language=None, wrap_lines=True)
elif title == "The decode loop and the KV cache":
    st.markdown(f"Each new token is fed back; the KV cache keeps every earlier token's keys and values, so only "
                f"the new one goes through the model. {m.kv_bytes(1):,} bytes per token:")
    big_chart(go.Figure(go.Scatter(y=[s.kv_cache_bytes / 2**20 for s in trace.steps], mode="lines+markers"))
              .update_layout(xaxis_title="decode step", yaxis_title="KV cache (MiB)"))
elif title == "The end token and clean-up":
    why = {"eos": "the model chose its end token", "length": "the token limit was reached",
           "stop": "a stop string appeared"}[trace.finish_reason]
    st.markdown(f"It stopped because **{why}**. The server sends a `completed` event with the usage "
                f"({trace.usage.prompt_tokens} prompt + {trace.usage.completion_tokens} completion tokens) and frees "
                f"**{trace.cleanup.kv_bytes_released:,} bytes** of KV cache.")
    st.code(json_text(trace.events[-1], indent=1), language="json", wrap_lines=True)
elif title == "The next request: prompt caching":
    rows = prompt_cache_conversation()
    st.markdown("The next request resends the whole conversation. A prompt cache keeps the keys and values of a "
                "start it has seen, so only the new part is computed:")
    for r in rows:
        s = r["stats"]
        st.markdown(f"**{r['label']}**: {plural(s['n_tokens'], 'token')}, **{s['tokens_reused']} reused**, "
                    f"{s['tokens_computed']} computed")
    learner_links(following or code, code is not None, stage)
else:  # a title in STAGES with no screen here: a mistake in this file, never a blank screen
    raise KeyError(f"presenter mode draws no screen for the stage {title!r}")

stage_link(full_page, f"Open the full page: {title}", "🔎")
stage_link("views/pages/start.py", "Leave presenter mode", "🚪")
if code:  # after the page: this browser keeps the key, so a reload or a second tab presents too
    room_key.keep_key(code, ss.pr_key)
back_next()
