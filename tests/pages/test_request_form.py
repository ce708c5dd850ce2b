"""The sidebar's request form shows the request on every run (tiny model, fast tier): each of its widgets
carries its value in every run's message, so a widget the browser first draws from a later run shows the
request, not its own default (views.request.session.show_values_in_form)."""
import os

import pytest
from kit.paths import ROOT
from streamlit.testing.v1 import AppTest

from views.request.session import FORM_KEYS

pytestmark = pytest.mark.usefixtures("tiny_app")


def form_widgets(at: AppTest) -> dict:
    """The request form's widgets by key (AppTest lists each kind apart)."""
    found = {}
    for kind in (at.text_area, at.text_input, at.slider, at.number_input):
        found.update({w.key: w for w in kind if w.key in FORM_KEYS})
    return found


def test_every_run_tells_the_browser_each_form_value():
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.query_params = {"q": "Are cucumbers fruit?", "max_new_tokens": "3", "top_p": "0.9"}
    at.run()
    at.run()  # a second run: nothing in it sets the request, the link was read in the first
    assert not at.exception, at.exception
    widgets = form_widgets(at)
    assert set(widgets) == set(FORM_KEYS)
    unsent = [key for key, w in widgets.items() if not w.proto.set_value]
    assert not unsent, f"these widgets' values are not in the second run's message: {unsent}"
    assert widgets["req_question"].proto.value == "Are cucumbers fruit?"
    assert widgets["req_max_new_tokens"].value == 3 and widgets["req_top_p"].value == 0.9


def test_a_submitted_edit_stays_after_later_runs():
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.query_params = {"max_new_tokens": "2"}
    at.run()
    at.text_area(key="req_question").input("Is a peanut a nut?")
    at.slider(key="req_max_new_tokens").set_value(3)
    next(b for b in at.button if b.label == "Run the model").click()
    at.run()
    at.run()
    assert not at.exception, at.exception
    assert at.text_area(key="req_question").value == "Is a peanut a nut?"
    assert at.slider(key="req_max_new_tokens").value == 3
    assert at.session_state["req_question"] == "Is a peanut a nut?"
