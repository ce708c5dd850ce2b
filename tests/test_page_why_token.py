"""The Why-this-token page (views/why_token.py) on the tiny model (fast tier): its charts' numbers are the
attribution of the run's own chosen token, the buttons run the interventions and integrated gradients, and
token text reaches the page escaped."""
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from conftest import chart_data

ROOT = Path(__file__).resolve().parents[1]


def run_page() -> AppTest:
    at = AppTest.from_file(str(ROOT / "views" / "why_token.py"), default_timeout=240)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_logit_parts_on_the_page_add_up_to_the_runs_own_score(tiny_app):
    from conftest import DEFAULT_QUESTION
    from pipeline.stages.request import ChatRequest
    from pipeline.trace import run_trace

    at = run_page()
    trace = run_trace(ChatRequest.from_question(DEFAULT_QUESTION), tiny_app)  # the page's run, run again
    chosen = trace.generated_token_ids[0]
    bars = chart_data(at.get("plotly_chart")[0])  # attention, MLP per layer
    heads = np.asarray(chart_data(at.get("plotly_chart")[1])[0]["z"])
    L = tiny_app.dims.L
    assert len(bars[0]["y"]) == L and heads.shape == (L, tiny_app.dims.H)
    np.testing.assert_allclose(heads.sum(1), bars[0]["y"], atol=1e-5)  # the heads make up their layer's bar
    text = " ".join(m.value for m in at.markdown)
    assert f"**{trace.step_logits[0][chosen]:.3f}**" in text  # the score shown is the run's own logit
    embedding = float(at.get("plotly_chart")[0].proto.spec.split("the embedding adds ")[1].split('"')[0])
    assert embedding + np.sum(bars[0]["y"]) + np.sum(bars[1]["y"]) == pytest.approx(
        float(trace.step_logits[0][chosen]), abs=2e-3)
    at.slider(key="why_threshold").set_value(0.3).run()  # a higher threshold keeps fewer routes
    assert not at.exception
    few = [c.value for c in at.caption if " routes above " in c.value and c.value[0].isdigit()][0]
    at.slider(key="why_threshold").set_value(0.02).run()
    many = [c.value for c in at.caption if " routes above " in c.value and c.value[0].isdigit()][0]
    assert int(few.split()[0]) < int(many.split()[0])


def test_buttons_ablate_patch_and_integrate(tiny_app):
    at = run_page()
    at.button(key="why_ablate").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("probability of" in m.value for m in at.markdown)
    at.button(key="why_ig").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("off by" in c.value for c in at.caption)
    at.text_input(key="why_corrupted").set_value("Are carrots fruit?").run()
    at.button(key="why_patch").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert any(c.value.startswith("1 = the clean answer") for c in at.caption)
    at.text_input(key="why_corrupted").set_value("Are carrots a kind of fruit?").run()
    at.button(key="why_patch").click().run()
    assert any("corrupted: must have as many tokens" in e.value for e in at.error)
