"""The Next token page: the top candidates against Hugging Face's scores, controls that start from the request's
options, sampling controls that never run the model again, the seed, the step. AppTest runs the page file on its own
(no app.py sidebar), from the session-state defaults in views/request/session.py, on the tiny random-weight model
(fixture `tiny_app`, fast tier).
"""
import torch
from kit.apptest import page_text, plotly_count, run_page
from kit.tiny_models import hf_forward, prompt_ids

from pipeline.stages.request import GenerationOptions


def test_next_token_page(tiny_app):
    at = run_page("next_token")
    assert at.title[0].value == "Next token"
    assert plotly_count(at) >= 2  # filter stages + draws histogram
    assert len(at.dataframe) >= 2  # top candidates + constrained output
    logits = hf_forward(tiny_app, prompt_ids(tiny_app)).logits[0, -1]  # the first step's scores
    top = torch.softmax(logits.double(), -1).topk(15)
    table = at.dataframe[0].value
    assert list(table["id"]) == top.indices.tolist()
    assert list(table["probability"]) == [f"{p:.2%}" for p in top.values.tolist()]
    run = GenerationOptions()  # the default request's options: the controls start from them
    assert [at.slider(key=k).value for k in ("nt_temperature", "nt_top_p", "nt_min_p")] == \
        [run.temperature, run.top_p, run.min_p]
    assert at.number_input(key="nt_top_k").value == run.top_k
    assert at.number_input(key="nt_seed").value == run.seed
    assert "−∞" in page_text(at)


def test_next_token_sliders_and_draws_never_run_the_model(tiny_app):
    at = run_page("next_token")
    lm = tiny_app
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


def test_next_token_seed_is_set_without_a_widget_default(monkeypatch, tiny_app):
    """The Draw-again button writes nt_seed through session state; the widget must not also have a default
    value, or Streamlit logs 'created with a default value but also had its value set via the Session State API'."""
    from streamlit.elements.lib import policies

    logged = []
    monkeypatch.setattr(policies, "_shown_default_value_warning", False)
    monkeypatch.setattr(policies._LOGGER, "warning", lambda msg, *args, **kw: logged.append(msg % args))
    at = run_page("next_token")
    at.button(key="nt_draw").click().run()
    at.button(key="nt_draw").click().run()
    assert not at.exception and at.number_input(key="nt_seed").value == 2
    assert not [m for m in logged if "nt_seed" in m], logged


def test_next_token_step_selector(tiny_app):
    at = run_page("next_token")
    at.slider(key="nt_step").set_value(3).run()
    assert not at.exception
    assert "Answer so far" in page_text(at)
