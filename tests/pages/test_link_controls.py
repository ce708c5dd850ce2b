"""A page's controls are declared beside their widgets (views/links/controls.py) and the link code collects them:
a control added to a page is in its link, both ways, with nothing else to edit. AppTest on a small page of its own
that goes through the link code as app.py does (restore on arrival, bind, the page, sync); no model."""
import pytest
from streamlit.testing.v1 import AppTest


def link_page() -> None:
    """A page of one new control (and one left out), under the link code's flow as app.py runs it."""
    import streamlit as st

    from views.links import url_state
    from views.links.controls import left_out, linked
    from views.links.params import integer

    url_state.restore("test-page", {})
    url_state.bind("test-page", {})
    st.session_state["depth"] = linked(st.slider, "zz_depth", integer(0, 9), "depth", 0, 9, 3)
    left_out(st.text_input, "zz_note", "a note for this session only", "note")
    url_state.sync()


def opened(query: dict[str, str]) -> AppTest:
    at = AppTest.from_function(link_page, default_timeout=60)
    at.query_params = dict(query)
    at.run()
    assert not at.exception, at.exception
    return at


def query_of(at: AppTest) -> dict[str, str]:
    return {k: (v[-1] if isinstance(v, list) else v) for k, v in dict(at.query_params).items()}


def test_a_new_control_is_in_the_link_and_a_link_sets_it():
    at = opened({})
    assert query_of(at) == {"zz.depth": "3"}  # the page's controls are always in its link, the note never
    at.slider(key="zz_depth").set_value(7).run()
    assert query_of(at)["zz.depth"] == "7"
    assert "zz.note" not in query_of(at.text_input(key="zz_note").set_value("mine").run())
    again = opened(query_of(at))
    assert again.slider(key="zz_depth").value == 7 and again.session_state["depth"] == 7
    assert query_of(again) == query_of(at)


def test_a_bad_value_is_said_beside_the_control_and_the_default_kept():
    at = opened({"zz.depth": "99"})
    assert at.slider(key="zz_depth").value == 3
    assert any("`zz.depth` was not usable" in w.value and "from 0 to 9" in w.value for w in at.warning)


def test_a_link_value_is_applied_once_per_arrival():
    """The user's later move wins over the link that opened the page."""
    at = opened({"zz.depth": "5"})
    at.slider(key="zz_depth").set_value(2).run()
    at.run()
    assert at.slider(key="zz_depth").value == 2 and query_of(at)["zz.depth"] == "2"


def test_a_page_control_never_takes_a_request_parameters_name():
    from views.links.controls import declare
    from views.links.params import integer

    with pytest.raises(ValueError, match="the request's parameter"):
        declare("nt_top_k", integer(0, 9), name="top_k")
