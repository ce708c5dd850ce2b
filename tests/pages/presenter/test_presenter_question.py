"""Presenter mode: the question changes without leaving it (the sidebar is hidden there), and a new question starts
the walk again at stage 1. Fast tier: conftest's tiny model through app.py."""
import os

from kit.paths import ROOT
from streamlit.testing.v1 import AppTest

NEW = "Is a cucumber a fruit?"


def test_a_new_question_in_presenter_mode_starts_at_stage_1(tiny_app):
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.query_params = {"max_new_tokens": "3"}
    at.run()
    at.switch_page("views/pages/presenter/page.py").run()
    for _ in range(2):
        at.button(key="pr_next").click().run()
    assert at.title[0].value.startswith("3. ")
    at.text_input(key="pr_question").set_value(NEW)
    next(b for b in at.button if b.label == "Run it").click().run()
    assert not at.exception, at.exception
    assert at.session_state["req_question"] == NEW
    assert at.title[0].value.startswith("1. ")
    assert any(NEW in c.value for c in at.code)  # stage 1 shows the new request's JSON
    assert at.query_params["q"] == NEW  # the link (and the room) carry it
    at.button(key="pr_next").click().run()  # the same question again: stays where it is
    at.text_input(key="pr_question").set_value(NEW)
    next(b for b in at.button if b.label == "Run it").click().run()
    assert at.title[0].value.startswith("2. ")
