"""AppTest for the analysis pages: embeddings, position, layers, attention, next token.

Each page runs standalone (no sidebar) from the session-state defaults in views/common.py.
The trace is cached per process, so the model runs once for the whole module.
"""
import base64
import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from pipeline.model.loader import shared_model
from pipeline.stages import layers as la
from pipeline.stages.request import ChatRequest, GenerationOptions
from pipeline.trace import run_trace

pytestmark = pytest.mark.app

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 240  # the first page also captures the default trace on 2 shared CPU cores


def run_page(name: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "views" / f"{name}.py"), default_timeout=TIMEOUT)
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
    run = GenerationOptions()  # the default request's options: the controls start from them
    assert [at.slider(key=k).value for k in ("nt_temperature", "nt_top_p", "nt_min_p")] == \
        [run.temperature, run.top_p, run.min_p]
    assert at.number_input(key="nt_top_k").value == run.top_k
    assert at.number_input(key="nt_seed").value == run.seed
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


def test_next_token_seed_is_set_without_a_widget_default(monkeypatch):
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


def test_next_token_step_selector():
    at = run_page("next_token")
    at.slider(key="nt_step").set_value(3).run()
    assert not at.exception
    assert "Answer so far" in text_of(at)


def test_attention_page():
    at = run_page("attention")
    assert at.title[0].value == "Attention"
    assert plotly_count(at) >= 2  # T x T heatmap + one row as bars
    assert "grouped-query" in text_of(at)
    at.slider(key="at_layer").set_value(7).run()
    at.selectbox(key="at_head").set_value(4).run()
    assert not at.exception
    assert "layer 7, head 4" in str(at.get("plotly_chart")[0].proto)
    assert "KV head 1" in text_of(at)
    at.selectbox(key="at_row").set_value(3).run()
    assert not at.exception
    assert len(at.dataframe) >= 5  # GQA table + compare, mask, softmax, mix
    assert "Mix" in text_of(at)


def test_embeddings_page():
    at = run_page("embeddings")
    assert at.title[0].value == "Embeddings"
    assert plotly_count(at) == 2  # rows heatmap + PCA map
    assert len(at.dataframe) == 2  # neighbours + analogy
    assert at.dataframe[0].value["token"].iloc[0] == "␣tomato"  # the word is its own nearest neighbour
    at.text_input(key="em_word").set_value("Solanaceae").run()
    assert not at.exception and "mean of their rows" in text_of(at)
    at.text_area(key="em_words").set_value("cat, dog, <s>, <img src=x onerror=alert(1)>").run()
    assert not at.exception
    assert "&lt;img" in str(at.get("plotly_chart")[1].proto)  # escaped for plotly


def test_position_rope_page():
    at = run_page("position_rope")
    assert at.title[0].value == "Position (RoPE)"
    assert plotly_count(at) == 2
    scores = at.dataframe[0].value["score q·k/√Dh"]
    assert scores.nunique() == 1  # identical after every shift (6 decimals)
    at.slider(key="rope_layer").set_value(20).run()
    assert not at.exception and at.dataframe[0].value["score q·k/√Dh"].nunique() == 1


def test_layers_page():
    at = run_page("layers")
    assert at.title[0].value == "Layers"
    assert plotly_count(at) == 4  # norms, cosine, contributions, logit lens
    assert "Logit lens" in text_of(at)
    at.selectbox(key="ly_token").set_value(5).run()
    at.slider(key="ly_positions").set_value(8).run()
    assert not at.exception


LONG_QUESTION = "Tomatoes are fruit. " * 120  # > 512 prompt tokens: no stored attention, float16 captures


def run_long(name: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "views" / f"{name}.py"), default_timeout=TIMEOUT)
    at.session_state["req_question"] = LONG_QUESTION
    at.session_state["req_max_new_tokens"] = 2
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def chart_arrays(at: AppTest, index: int) -> dict[str, np.ndarray]:
    """{'<trace index>.<z|y|customdata>': values as float} for one plotly chart, typed arrays decoded."""
    out = {}
    for n, tr in enumerate(json.loads(at.get("plotly_chart")[index].proto.spec)["data"]):
        for field in ("z", "y", "customdata"):
            v = tr.get(field)
            if isinstance(v, dict) and "bdata" in v:  # plotly packs numpy arrays as base64
                out[f"{n}.{field}"] = np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).astype(float)
            elif isinstance(v, list) and v and not isinstance(np.ravel(v)[0], str):
                out[f"{n}.{field}"] = np.asarray(v, dtype=float).ravel()
    return out


@pytest.fixture(scope="module")
def long_trace():
    return run_trace(ChatRequest.from_question(LONG_QUESTION, options=GenerationOptions(max_new_tokens=2)),
                     shared_model())


def test_long_prompt_layer_analysis_is_finite(long_trace):
    p = long_trace.prefill
    assert len(long_trace.tokens) > 512 and p.attention is None and p.hidden_states.dtype == np.float16
    for name, values in [("norms", la.norms(p.hidden_states)), ("cosine", la.consecutive_cosine(p.hidden_states)),
                         *la.contributions(p.attn_out, p.mlp_out).items()]:
        assert np.isfinite(values).all(), f"{name} has inf/NaN on a long prompt"
    assert np.all(la.consecutive_cosine(p.hidden_states) <= 1 + 1e-3)


def test_layers_page_long_prompt():
    at = run_long("layers")
    assert len(at.get("plotly_chart")) == 4
    for i in range(4):
        arrays = chart_arrays(at, i)
        assert arrays, f"chart {i}: no numbers found"
        for name, values in arrays.items():
            assert np.isfinite(values).all(), f"chart {i} {name}: inf/NaN on a long prompt"
    at.selectbox(key="ly_token").set_value(600).run()
    assert not at.exception


def test_attention_page_long_prompt_shows_a_window(long_trace):
    at = run_long("attention")
    T = len(long_trace.tokens)
    assert T > 512
    assert "last 256 of T" in str(at.get("plotly_chart")[0].proto)
    assert "shows only the last 256" in text_of(at)
    heat = chart_arrays(at, 0)["0.z"]  # (256 * 256,) weights, NaN only for the masked future
    assert heat.size == 256 * 256
    assert np.isfinite(heat).sum() == 256 * 257 // 2 and np.nanmin(heat) >= 0 and np.nanmax(heat) <= 1
    row = chart_arrays(at, 1)["0.y"]  # the last token's row, keys in the window
    assert np.isfinite(row).all() and 0 < row.sum() <= 1 + 1e-5
    at.slider(key="at_layer").set_value(12).run()
    at.selectbox(key="at_row").set_value(T - 100).run()
    assert not at.exception
    assert "layer 12, head 0" in str(at.get("plotly_chart")[0].proto)
