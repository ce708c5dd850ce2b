"""Penalties and bias in the app (tiny model, fast tier): the sidebar and its links both ways, a bad link value
refused with a note, and the Next token page's raw-to-final table."""
import os

import pytest
from kit.apptest import page_app
from kit.paths import ROOT
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.usefixtures("tiny_app")

LINK = {"max_new_tokens": "2", "repetition_penalty": "1.3", "presence_penalty": "0.5", "frequency_penalty": "-0.25",
        "logit_bias": "13:-100,7:2.5"}


def app_at(**query) -> AppTest:
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.query_params = dict(query)
    return at


def test_a_link_sets_the_penalties_and_the_link_keeps_them():
    at = app_at(**LINK)
    at.run()
    assert not at.exception, at.exception
    assert not [w.value for w in at.warning if "link" in w.value]
    assert at.slider(key="req_repetition_penalty").value == 1.3
    assert at.slider(key="req_presence_penalty").value == 0.5
    assert at.slider(key="req_frequency_penalty").value == -0.25
    assert at.text_input(key="req_logit_bias").value == "7:2.5, 13:-100"  # sorted by id, one way to write it
    assert {k: at.query_params[k] for k in LINK} == {**LINK, "logit_bias": "7:2.5, 13:-100"}


def test_bad_link_values_are_notes_and_the_defaults():
    bad = {"logit_bias": ("49152:1", "past the vocabulary"), "repetition_penalty": ("0", "must be from"),
           "presence_penalty": ("nan", "must be from")}  # other bad forms: tests/pipeline/stages/test_penalties.py
    at = app_at(max_new_tokens="2", **{name: value for name, (value, _) in bad.items()})
    at.run()
    assert not at.exception, at.exception
    for name, (_, why) in bad.items():
        notes = [w.value for w in at.warning if f"`{name}`" in w.value]
        assert notes and why in notes[0] and "not usable" in notes[0], [w.value for w in at.warning]
        assert name not in at.query_params  # back to the default, which the link leaves out


def test_the_next_token_page_shows_each_stage_for_the_chosen_token(tiny_app):
    favourite = 5_000  # +100 on one token's score: the greedy answer is that token at every step
    at = page_app("next_token", req_max_new_tokens=3, req_logit_bias=f"{favourite}:100")
    at.run()
    assert not at.exception, at.exception
    table = next(t.value for t in at.dataframe if "after penalties and bias" in t.value.columns)
    row = table[table["id"] == favourite].iloc[0]
    assert row["token"].endswith("← chosen")
    assert float(row["raw (softmax, T = 1)"].rstrip("%")) < 1  # a random model's scores are all close
    assert row["after penalties and bias"] == row["final (after top-k, top-p, min-p)"] == "100.00%"
    assert any("a logit bias on 1 token" in c.value for c in at.caption)


@pytest.mark.parametrize("typed, why", [("99999:1", "past the vocabulary"), ("13:-500", "from -100 to 100")])
def test_a_bad_logit_bias_in_the_sidebar_is_a_message_naming_the_field(typed, why):
    at = page_app("next_token", req_logit_bias=typed)
    at.run()
    assert not at.exception, at.exception
    assert [e.value for e in at.error] and "logit" in at.error[0].value and why in at.error[0].value
