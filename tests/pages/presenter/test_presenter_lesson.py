"""Presenter mode with a lesson (`--lesson FILE`, TPE_LESSON): the room starts at the lesson's first stage with its
request and the screen of its page, the lesson's buttons move through its stages, and the runs' progress is shown.
Fast tier: the tiny model through app.py."""
import os

import pytest
from kit.apptest import lesson_presenter
from kit.paths import ROOT
from streamlit.testing.v1 import AppTest

from pipeline.server.polls.store import poll_store
from pipeline.server.room import room_store

pytestmark = pytest.mark.usefixtures("lessons_reported")  # kit.app_fixtures

LESSON = """title = "Two stages"

[[stages]]
title = "Tokens first"
page = "tokens"
say = "Count the pieces."
poll = {kind = "tokens", question = "How many tokens?"}
[stages.request]
q = "Is a peanut a nut?"
max_new_tokens = 3

[[stages]]
title = "Then the next token"
page = "next-token"
[stages.request]
q = "Is a peanut a nut?"
max_new_tokens = 2
temperature = 0.5
"""


def test_the_room_starts_at_the_lessons_first_stage_and_moves_through_it(tiny_app, tmp_path, monkeypatch):
    at, _ = lesson_presenter(tmp_path, monkeypatch, LESSON)
    assert at.session_state["req_question"] == "Is a peanut a nut?" and at.session_state["req_max_new_tokens"] == 3
    assert at.title[0].value.startswith("3. Tokens")  # the presenter's screen of the Tokens page
    assert "stage 1 of 2" not in " ".join(m.value for m in at.markdown)  # no room presented: no lesson panel yet
    at.button(key="pr_start").click().run()
    text = " ".join(m.value for m in at.markdown)
    assert "stage 1 of 2" in text and "Tokens first" in text and "How many tokens?" in text
    assert any("Lesson runs prepared" in p.proto.text for p in at.get("progress"))
    at.button(key="ls_next").click().run()
    at.run()  # the request the stage brought is applied before the sidebar (as a link switch is)
    assert not at.exception, at.exception
    assert at.session_state["req_max_new_tokens"] == 2 and at.session_state["req_temperature"] == 0.5
    assert at.title[0].value.startswith("8. ")  # the first screen of the Next token page
    assert "stage 2 of 2" in " ".join(m.value for m in at.markdown)


def test_a_stages_poll_opens_in_the_room_with_the_lessons_question_and_kind(tiny_app, tmp_path, monkeypatch):
    at, _ = lesson_presenter(tmp_path, monkeypatch, LESSON)
    assert "ls_poll" not in [b.key for b in at.button]  # no room yet: no panel, nothing to open it in
    at.button(key="pr_start").click().run()
    room = at.session_state["pr_room"]
    assert poll_store().current(room) is None
    at.button(key="ls_poll").click().run()
    assert not at.exception, at.exception
    poll = poll_store().current(room)
    assert (poll.kind, poll.question, poll.status) == ("tokens", "How many tokens?", "open")
    assert poll.query == room_store().room(room)["query"] and poll.query["max_new_tokens"] == "3"  # the stage's
    assert poll.stage == 3 and poll.real["count"] > 0  # the Tokens screen; the real figure of that request
    assert "0 answered" in " ".join(m.value for m in at.markdown)


def test_a_learner_who_stops_following_sees_no_lesson_panel(tiny_app, tmp_path, monkeypatch):
    presenter, _ = lesson_presenter(tmp_path, monkeypatch, LESSON)
    presenter.button(key="pr_start").click().run()
    code = presenter.session_state["pr_room"]
    learner = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    learner.run()
    learner.session_state["pr_follow"] = code
    learner.switch_page("views/pages/presenter/page.py").run()
    assert learner.session_state["pr_follow"] == code and not learner.exception, learner.exception
    learner.button(key="pr_unfollow").click().run()
    assert "pr_follow" not in learner.session_state and not learner.exception, learner.exception
    text = " ".join(m.value for m in [*learner.markdown, *learner.caption])
    assert "Count the pieces." not in text and "How many tokens?" not in text and "stage 1 of 2" not in text, text
    assert not [b for b in learner.button if b.key in ("ls_prev", "ls_next", "ls_poll")]
