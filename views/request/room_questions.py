"""Learners' own questions, counted for the room they followed (the presenter's room summary: a count, no name, no
text). A question is a learner's own when the session followed a room and then ran a question that room never showed
it (Presenter mode records the room's questions as it follows)."""
import streamlit as st

from views.chrome.my_session import learner_session_id


def note_room_question() -> None:
    ss = st.session_state
    rooms, question = ss.get("pr_seen_rooms"), ss.get("req_question")
    if not rooms or not question or question in ss.get("pr_room_questions", ()):
        return
    noted = ss.setdefault("pr_noted_questions", set())
    if question in noted:
        return
    noted.add(question)
    from pipeline.server.polls.store import poll_store

    for code in rooms:
        poll_store().note_question(code, learner_session_id(), question)
