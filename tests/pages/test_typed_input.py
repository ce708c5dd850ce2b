"""Hostile input typed into the app's boxes, or put in a link: a clear message naming the box or the link's
parameter, and no error box. A token id of thousands of digits (Python's int() refuses more than 4,300 with its
own words), words and texts past a box's limit, lone surrogates. On the tiny model (fixture `tiny_app`, fast tier);
what the browser does with a lone surrogate is tests/browser/test_browser.py's."""
import os

import pytest
from kit.apptest import shown
from kit.paths import ROOT
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.usefixtures("tiny_app")

HUGE_ID = "1" * 4_301  # one digit past what int() reads


def app() -> AppTest:
    return AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)


def test_a_logit_bias_token_id_of_thousands_of_digits_in_the_sidebar_is_a_message_on_every_page():
    at = app()
    at.session_state["req_logit_bias"] = f"{HUGE_ID}:5"
    at.run()  # the Start page: the sidebar's run of the request is looked up for the downloads
    assert not at.exception, at.exception
    at.switch_page("views/pages/journey.py").run()
    assert not at.exception, at.exception
    said = shown(at.error)
    assert "logit_bias" in said and "4,301 characters" in said, said


@pytest.mark.parametrize("name,value", [("logit_bias", f"{HUGE_ID}:5"), ("seed", "9" * 5_000),
                                        ("top_k", "7" * 5_000), ("temperature", "1" * 5_000)])
def test_a_link_with_a_number_of_thousands_of_digits_falls_back_with_a_note_in_our_words(name, value):
    at = app()
    at.query_params = {name: value}
    at.run()
    assert not at.exception, at.exception
    note = next(w for w in shown(at.warning).split("The link's ") if w.startswith(f"{name} "))
    assert "not usable" in note and "using the default" in note, note
    assert "int_max_str_digits" not in note and "Exceeds the limit" not in note, note  # not Python's words
    at.switch_page("views/pages/journey.py").run()
    assert not at.exception, at.exception


def page_scripts(at: AppTest) -> list[str]:
    """The HTML the page puts in with JavaScript allowed (st.html(..., unsafe_allow_javascript=True))."""
    return [h.proto.body for h in at.get("html") if h.proto.unsafe_allow_javascript]


def test_every_page_carries_the_script_that_removes_lone_surrogates_in_the_browser():
    """A lone surrogate never reaches the server: Streamlit's frontend writes it as bytes that are not UTF-8, the
    server refuses the message and closes the connection (the edit was lost without a word), and a page setting
    one in session state fails inside st.text_input. So the browser removes it, and says so naming the box
    (ui/text_guard.py; what it does there is tests/browser/test_browser.py's)."""
    from ui.text_guard import SCRIPT

    at = app().run()
    assert not at.exception and SCRIPT in page_scripts(at)
    at.switch_page("views/pages/tokens.py").run()
    assert not at.exception and SCRIPT in page_scripts(at)
