"""The Position (RoPE) page: the score of a shifted pair stays the same. AppTest runs the page file on its own (no
app.py sidebar), from the session-state defaults in views/request/session.py, on the tiny random-weight model
(fixture `tiny_app`, fast tier).
"""
from kit.apptest import plotly_count, run_page


def test_position_rope_page(tiny_app):
    at = run_page("position")
    assert at.title[0].value == "Position (RoPE)"
    assert plotly_count(at) == 2
    scores = at.dataframe[0].value["score q·k/√Dh"]
    assert scores.nunique() == 1  # identical after every shift (6 decimals)
    at.slider(key="rope_layer").set_value(20).run()
    assert not at.exception and at.dataframe[0].value["score q·k/√Dh"].nunique() == 1
