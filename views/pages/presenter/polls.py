"""Presenter mode's polls (predict, then reveal): the presenter opens a question about the current stage, sees how
many have answered (a count, never a name or an answer), reveals the class's answers beside the model's real figure,
and closes it; a learner holding the follow link answers on their own screen and, after Reveal, sees the class view
with their own answer marked. The store (pipeline/server/polls/store.py) checks the presenter key on every move:
this page only draws."""
import streamlit as st

from pipeline.core.poll_kinds import kind_title
from pipeline.server.polls.real import poll_inputs
from pipeline.server.polls.record import DEFAULT_QUESTIONS, KINDS, MAX_QUESTION_CHARS, Poll
from pipeline.server.polls.store import PollClosed, PollFull, poll_store
from pipeline.server.polls.summary import poll_answers, summary_csv
from pipeline.server.polls.tally import bucket, class_view, real_answer, spread
from ui.escape import code_span, markdown_text
from ui.poll_chart import class_view_figure
from ui.room_summary import room_summary_html
from views.chrome.my_session import learner_session_id
from views.links.controls import left_out
from views.pages.presenter.room import FOLLOW_EVERY_S
from views.pages.presenter.stages import poll_kind_at
from views.server.scenarios import prompt_cache_conversation

PRESENTER_ONLY = "a poll is the presenter's move in the room, not a view a link reproduces"
ANSWER_ONLY = "a learner's answer goes to the room's poll, not into a link"


def _state(poll: Poll | None):
    return None if poll is None else (poll.id, poll.status)


@st.fragment(run_every=FOLLOW_EVERY_S)
def watch_poll(code: str, shown) -> None:
    """A learner's page: when the room's poll opens, is revealed or closes, draw the page again."""
    if _state(poll_store().current(code)) != shown:
        st.rerun()


@st.fragment(run_every=FOLLOW_EVERY_S)
def answered(code: str, poll_id: str) -> None:
    """The presenter's live count: how many learner sessions have answered (no name, no answer)."""
    st.markdown(f"### {poll_store().count(code, poll_id)} answered")


def _inputs(kind: str, trace, tok, pick: bool = False) -> dict:
    """The poll's real figure and choices for this page's request."""
    return poll_inputs(kind, trace, tok, prompt_cache_conversation() if kind == "prompt_caching" else None, pick)


def open_room_poll(code: str, key: str, stage: int, params: dict, trace, tok, kind: str, question: str,
                   pick: bool = False) -> None:
    """Open a poll of `kind` asking `question` about the room's request now (`params`, its run `trace`), with its
    real figure and choices: the one way this page opens a poll (the presenter's form, a lesson stage's poll). A
    refusal is said on the next run."""
    try:
        poll_store().open_poll(code, key, kind, question, params, stage, **_inputs(kind, trace, tok, pick))
    except (PermissionError, PollFull, OSError, ValueError) as e:
        st.session_state.pp_error = str(e)


def _open(code: str, key: str, stage: int, params: dict, trace, tok) -> None:
    """Open poll's callback: the kind and question as the presenter left them."""
    ss = st.session_state
    kind = ss.get("pp_kind", "next_token")
    open_room_poll(code, key, stage, params, trace, tok, kind, ss.get(f"pp_question_{kind}", ""),
                   bool(ss.get("pp_pick")))


def _move(move: str, code: str, key: str, poll_id: str) -> None:
    try:
        if move == "reveal":
            poll_store().reveal(code, key, poll_id)
        else:
            poll_store().close(code, key, poll_id)
    except (PermissionError, OSError, ValueError) as e:
        st.session_state.pp_error = str(e)


def presenter_polls(code: str, key: str, stage: int, params: dict, trace, tok) -> None:
    """The presenter's poll: open one for this stage, watch the count, reveal, close."""
    error = st.session_state.pop("pp_error", None)
    if error:
        st.error(f"The poll could not be changed: {markdown_text(error)}", icon="🗳️")
    summary_downloads(code)
    poll = poll_store().current(code)
    if poll is None:
        with st.expander("Ask the room a question (learners answer on their own screens)", icon="🗳️"):
            kind = left_out(st.selectbox, "pp_kind", PRESENTER_ONLY, "Kind of question", KINDS,
                            index=KINDS.index(poll_kind_at(stage)), format_func=kind_title)
            left_out(st.text_input, f"pp_question_{kind}", PRESENTER_ONLY, "Question", value=DEFAULT_QUESTIONS[kind],
                     max_chars=MAX_QUESTION_CHARS)
            if kind == "next_token":
                left_out(st.checkbox, "pp_pick", PRESENTER_ONLY, "Learners pick among the model's 8 best tokens "
                         "(shuffled) instead of typing a guess")
            st.button("Open the poll", key="pp_open", type="primary", on_click=_open,
                      args=(code, key, stage, params, trace, tok))
        return
    st.markdown(f"#### 🗳️ {markdown_text(poll.question)}")
    c1, c2, c3 = st.columns([2, 1, 1])
    with c1:
        if poll.status == "open":
            answered(code, poll.id)
        elif poll.status == "revealing":  # another replica's Reveal under way, or one cut short: Reveal finishes it
            st.markdown("### Revealing…")
        else:
            st.markdown(f"### {len(poll.revealed_answers or [])} answered")
    c2.button("Reveal", key="pp_reveal", type="primary", disabled=poll.status not in ("open", "revealing"),
              on_click=_move, args=("reveal", code, key, poll.id), width="stretch")
    c3.button("Close the poll", key="pp_close", on_click=_move, args=("close", code, key, poll.id), width="stretch")
    if poll.status == "revealed":
        draw_class_view(poll)


def _make_summary(code: str) -> None:
    """Make the room summary's two files (kept in this session until the next click)."""
    store = poll_store()
    polls = [(p, poll_answers(p, store.answers(code, p.id))) for p in store.polls(code)]
    asked = store.questions_asked(code)
    st.session_state.pp_summary = (code, room_summary_html(code, polls, asked), summary_csv(polls, asked))


def summary_downloads(code: str) -> None:
    """The presenter's room summary: every poll, the class's answers and the real ones, as HTML and as CSV."""
    with st.expander("Room summary: the polls with the class's answers and the real ones (HTML, CSV)", icon="📋"):
        st.button("Make the room summary", key="pp_make_summary", on_click=_make_summary, args=(code,))
        made = st.session_state.get("pp_summary")
        if made and made[0] == code:
            st.download_button("Download the room summary (HTML, opens offline)", made[1],
                               file_name=f"room-{code}-summary.html", mime="text/html", key="pp_dl_html",
                               on_click="ignore")
            st.download_button("Download the room summary (CSV)", made[2], file_name=f"room-{code}-summary.csv",
                               mime="text/csv", key="pp_dl_csv", on_click="ignore")


def draw_class_view(poll: Poll, mine: str | None = None) -> None:
    """The class's answers beside the model's real figure (after Reveal only)."""
    answers = poll.revealed_answers or []
    rows = class_view(poll, answers)
    st.plotly_chart(class_view_figure(poll.kind, rows, None if mine is None else bucket(poll, mine)),
                    width="stretch", key=f"pl_chart_{poll.id}")
    st.markdown(f"**The model's real answer:** {code_span(real_answer(poll))}")
    numbers = spread(poll, answers)
    if numbers:
        st.markdown(f"The class: from {numbers['min']:,} to {numbers['max']:,}, median {numbers['median']:,}.")
    if poll.kind == "tokens" and poll.real:
        st.markdown(" ".join(code_span(t) for t in poll.real["tokens"][:120]))


def _answer_widget(poll: Poll):
    """The input a learner answers with, by kind."""
    if poll.kind in ("tokens", "prompt_caching"):
        return left_out(st.number_input, "pl_number", ANSWER_ONLY, "Your guess (a whole number)", min_value=0,
                        max_value=1_000_000, step=1, value=None)
    if poll.kind == "temperature":
        return left_out(st.radio, "pl_yes_no", ANSWER_ONLY, "Your guess", ["yes", "no"], index=None, horizontal=True)
    if poll.kind == "attention":
        picked = left_out(st.selectbox, "pl_position", ANSWER_ONLY, "The token it looks at most",
                          range(len(poll.choices)), index=None, format_func=lambda i: poll.choices[i])
        return picked
    if poll.choices:  # next_token, picked among the model's 8 best (shuffled)
        return left_out(st.radio, "pl_pick", ANSWER_ONLY, "Your guess: the next token", poll.choices, index=None,
                        format_func=markdown_text)  # a radio's options are Markdown: token text shown as text
    return left_out(st.text_input, "pl_text", ANSWER_ONLY, "Your guess: the next token")  # the store cuts it


def learner_polls(code: str) -> None:
    """A learner's side: the open poll's question and an input; after Reveal, the class view with their answer."""
    store = poll_store()
    poll = store.current(code)
    watch_poll(code, _state(poll))
    if poll is None:
        return
    st.markdown(f"#### 🗳️ The presenter asks: {markdown_text(poll.question)}")
    session = learner_session_id()  # the id My session reads this learner's answers by
    if poll.status == "open":
        with st.form(f"pl_form_{poll.id}"):
            value = _answer_widget(poll)
            sent = st.form_submit_button("Send my answer", type="primary")
        if sent and value not in (None, ""):
            try:
                store.answer(code, poll.id, session, str(int(value) if isinstance(value, float) else value))
            except (ValueError, PollClosed, PollFull, OSError) as e:
                st.error(markdown_text(str(e)), icon="🗳️")
    mine = store.answer_of(code, poll.id, session)
    if mine is not None:
        shown = poll.choices[int(mine)] if poll.kind == "attention" and int(mine) < len(poll.choices) else mine
        st.markdown(f"Your answer: {code_span(shown)}" + (" (you can change it until the presenter reveals the "
                                                          "answers)" if poll.status == "open" else ""))
    if poll.status == "revealed":
        draw_class_view(poll, mine)
    else:
        st.caption("Nobody sees another's answer before the reveal; the presenter sees only how many answered.")
