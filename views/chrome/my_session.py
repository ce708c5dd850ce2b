"""What a learner keeps of their own session, in their browser session only (st.session_state: never shown to
anyone else): the views they visited in order, a short note on any view, and "My session", one offline HTML file of
both (ui/session_summary.py) with their poll answers. Drawn in the sidebar on every page (app.py)."""
from __future__ import annotations

import hashlib
import secrets
import time

import streamlit as st

from ui.session_summary import session_summary_html
from views.links import url_state

NOTE_CHARS = 500  # one note, in characters
MAX_NOTES = 100  # notes kept per session
MAX_VISITS = 200  # views kept per session (the oldest go first)
LONG_LINK = 2000  # characters: a longer view is kept as a short link the server resolves
VISITS, NOTES, SUMMARY = "ms_visits", "ms_notes", "ms_summary"  # session keys


def learner_session_id() -> str:
    """This browser session's id in the room: its poll answers are kept under it (the presenter page's polls), its
    own questions counted by it (views/request/room_questions.py), and My session reads its answers back by it."""
    return st.session_state.setdefault("ms_session_id", secrets.token_hex(16))


def poll_answers_for(session_id: str) -> list:
    """This learner session's poll answers, each {"question", "yours", "class", "real"} (the summary's table), from
    the rooms' polls store: "class" and "real" only for a poll the presenter revealed."""
    from pipeline.server.polls.store import poll_store
    from pipeline.server.polls.summary import learner_rows

    return learner_rows(poll_store().answered_by(session_id))


def view_link(page: str) -> str:
    """The link to the view shown now (a short link when the query is long, as the learners' links are)."""
    link = url_state.link(page)
    if len(link) <= LONG_LINK:
        return link
    from pipeline.server.room import room_store

    code = room_store().put_link(dict(st.query_params))
    return link.split("?")[0] + (f"?link={code}" if code else "")


def record_visit(page: str, title: str, trace, tokenizer) -> str:
    """Keep this view in the session's list (a view shown again in a row is kept once, its figures updated):
    its link, question, answer and the first answer token's top candidates as shown. Returns its link."""
    from pipeline.stages.next_token import first_answer_top

    link = view_link(page)
    visit = {"title": title, "page": page, "link": link, "at": time.strftime("%H:%M")}
    if trace is not None:
        visit.update(question=trace.request.messages[-1][1][:500], model=trace.dims.name, answer=trace.text[:2000],
                     top=[[c["label"], c["probability"]] for c in first_answer_top(tokenizer, trace)])
    visits = st.session_state.setdefault(VISITS, [])
    if visits and visits[-1]["link"] == link:
        visits[-1] = visit
    else:
        visits.append(visit)
        del visits[:-MAX_VISITS]
    return link


def _save_note(link: str, key: str) -> None:
    notes = st.session_state.setdefault(NOTES, {})
    text = (st.session_state.get(key) or "").strip()[:NOTE_CHARS]  # the box's bound, kept here too
    if not text:
        notes.pop(link, None)
    elif link in notes or len(notes) < MAX_NOTES:
        notes[link] = text
    else:
        st.session_state["ms_refused"] = f"You have {MAX_NOTES} notes, the most kept: empty one to write another."


def _make_summary() -> None:
    ss = st.session_state
    ss[SUMMARY] = session_summary_html(ss.get(VISITS, []), ss.get(NOTES, {}), poll_answers_for(learner_session_id()),
                                       made_at=time.strftime("%Y-%m-%d %H:%M"))


def notes_and_summary(link: str) -> None:
    """The note box for the view at `link`, and the "My session" download."""
    ss = st.session_state
    notes = ss.get(NOTES, {})
    refused = ss.pop("ms_refused", None)
    if refused:
        st.warning(refused, icon="📝")
    key = "ms_note_" + hashlib.sha256(link.encode("utf-8", "surrogatepass")).hexdigest()[:12]  # one box per view
    with st.form("ms_note_form", border=False):
        st.text_area(f"Your note on this view (up to {NOTE_CHARS} characters; only you see it)",
                     value=notes.get(link, ""), max_chars=NOTE_CHARS, key=key, height=80)
        st.form_submit_button("Save the note", on_click=_save_note, args=(link, key), width="stretch")
    st.caption(f"{len(ss.get(VISITS, []))} views visited, {len(notes)} notes in this browser session.")
    st.button("Make my session summary (one HTML file that opens offline)", key="ms_make", on_click=_make_summary,
              width="stretch")
    if ss.get(SUMMARY):
        st.download_button("Download my session", ss[SUMMARY], file_name="my-session.html", mime="text/html",
                           key="ms_download", width="stretch", on_click="ignore")
