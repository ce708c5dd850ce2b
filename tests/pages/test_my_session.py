"""A learner's notes and "My session" (views/chrome/my_session.py) through app.py on the tiny model (fast tier): the
views visited are kept in order, a note attaches to the view shown, bounded, and stays with that browser session
only; the summary holds both."""
import os

import pytest
from kit.paths import ROOT
from streamlit.testing.v1 import AppTest

from views.chrome.my_session import NOTE_CHARS, poll_answers_for

pytestmark = pytest.mark.usefixtures("tiny_app")


def note_box(at):
    return next(t for t in at.text_area if t.key.startswith("ms_note_"))


def save_note(at, text: str):
    note_box(at).input(text)
    next(b for b in at.button if b.label == "Save the note").click().run()


def test_visits_and_notes_are_kept_in_order_in_this_session_only():
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.query_params = {"max_new_tokens": "2"}
    at.run()
    at.switch_page("views/pages/tokens.py").run()
    save_note(at, "Tokens are pieces, not words. <b>bold?</b>")
    assert not at.exception, at.exception
    at.switch_page("views/pages/request.py").run()
    assert note_box(at).value == ""  # a new view opens with its own (empty) note
    at.session_state[note_box(at).key] = "x" * (NOTE_CHARS + 300)  # past the box's bound (a client not the app's)
    next(b for b in at.button if b.label == "Save the note").click().run()
    visits = [v["page"] for v in at.session_state["ms_visits"]]
    assert visits == ["start", "tokens", "request"]
    notes = at.session_state["ms_notes"]
    assert len(notes) == 2 and sorted(map(len, notes.values())) == [42, NOTE_CHARS]
    tokens_link = at.session_state["ms_visits"][1]["link"]
    assert notes[tokens_link] == "Tokens are pieces, not words. <b>bold?</b>"
    assert at.session_state["ms_visits"][1]["answer"] is not None  # the run as it was shown

    next(b for b in at.button if b.key == "ms_make").click().run()
    summary = at.session_state["ms_summary"]
    assert summary.index(">Start</a>") < summary.index(">Tokens</a>") < summary.index(">Request &amp; template</a>")
    assert "Tokens are pieces, not words. &lt;b&gt;bold?&lt;/b&gt;" in summary
    assert any(b.label == "Download my session" for b in at.get("download_button"))

    other = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)  # another learner's browser
    other.query_params = {"max_new_tokens": "2"}
    other.run()
    other.switch_page("views/pages/tokens.py").run()
    assert note_box(other).value == "" and "ms_notes" not in other.session_state


def test_a_session_that_answered_no_poll_has_no_poll_answers():
    assert poll_answers_for("0" * 32) == []


def test_a_visits_top_tokens_are_the_next_token_polls_figure(tiny_app):
    """My session keeps the first answer token's 8 best as the next-token poll's real figure has them (one helper):
    softmax at T = 1 over the step's logits, labelled as they read after the prompt, at any temperature and top-k."""
    from pipeline.run.trace import run_trace
    from pipeline.server.polls.real import real_figure
    from pipeline.stages.request import ChatRequest, GenerationOptions
    from views.request.session import DEFAULTS

    query = {"max_new_tokens": "2", "temperature": "0.4", "top_k": "3"}
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.query_params = query
    at.run()
    at.switch_page("views/pages/tokens.py").run()
    assert not at.exception, at.exception
    visit = at.session_state["ms_visits"][-1]
    options = GenerationOptions(max_new_tokens=2, temperature=0.4, top_k=3)
    trace = run_trace(ChatRequest.from_question(DEFAULTS["question"], options=options), tiny_app)  # the page's run
    assert trace.text == visit["answer"]
    real = real_figure("next_token", trace, tiny_app.tokenizer)["top"]
    assert len(visit["top"]) == 8 == len(real)
    assert [label for label, _ in visit["top"]] == [c["label"] for c in real]
    assert [round(p, 9) for _, p in visit["top"]] == [round(c["probability"], 9) for c in real]
