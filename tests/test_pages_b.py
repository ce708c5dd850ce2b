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
