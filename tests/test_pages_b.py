"""AppTest for the analysis pages: embeddings, position, layers, attention, next token.

Each page runs standalone (no sidebar) from the session-state defaults in pages/common.py.
The trace is cached per process, so the model runs once for the whole module.
"""
from pathlib import Path

from streamlit.testing.v1 import AppTest

from pipeline.loader import shared_model

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 240  # the first page also captures the default trace on 2 shared CPU cores


def run_page(name: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "pages" / f"{name}.py"), default_timeout=TIMEOUT)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def plotly_count(at: AppTest) -> int:
    return len(at.get("plotly_chart"))


def text_of(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [s.value for s in at.subheader]
    return "\n".join(parts)


def test_next_token_page():
    at = run_page("next_token")
    assert at.title[0].value == "Next token"
    assert plotly_count(at) >= 2  # filter stages + draws histogram
    assert len(at.dataframe) >= 2  # top candidates + constrained output
    for key in ("nt_temperature", "nt_top_p", "nt_min_p"):
        at.slider(key=key)
    at.number_input(key="nt_top_k")
    at.number_input(key="nt_seed")
    assert "−∞" in text_of(at)


def test_next_token_sliders_and_draws_never_run_the_model():
    at = run_page("next_token")
    lm = shared_model()
    before = lm.calls
    at.slider(key="nt_temperature").set_value(1.7).run()
    assert not at.exception
    at.slider(key="nt_top_p").set_value(0.5).run()
    at.select_slider(key="nt_draws").set_value(10000).run()
    seed = at.number_input(key="nt_seed").value
    at.button(key="nt_draw").click().run()
    assert not at.exception
    assert at.number_input(key="nt_seed").value == seed + 1  # the draw button really acted
    at.text_input(key="nt_allowed").set_value("Yes, No, Maybe").run()
    assert not at.exception
    assert lm.calls == before, "a sampling control ran the model again"
    assert "10,000 draws" in " ".join(str(c.proto) for c in at.get("plotly_chart"))


def test_next_token_step_selector():
    at = run_page("next_token")
    at.slider(key="nt_step").set_value(3).run()
    assert not at.exception
    assert "Answer so far" in text_of(at)
