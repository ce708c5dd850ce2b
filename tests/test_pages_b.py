"""AppTest for the analysis pages: embeddings, position, layers, attention, next token.

Each page runs standalone (no sidebar) from the session-state defaults in views/request/session.py, on the tiny
random-weight model (fixture `tiny_app`, fast tier). Embeddings also runs on the real model, and so do the
long-prompt checks whose failure only real activations show (float16 overflow) (markers `app`, `model`).
The trace is cached per process, so each model runs the default request once.
"""
import base64
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from kit.apptest import chart, chart_data, run_page
from kit.paths import page_file
from kit.tiny_models import hf_forward, prompt_ids
from kit.tolerance import U16, U32, assert_within, attention_tolerance, float32_tolerance, forward_tolerance, scale
from streamlit.testing.v1 import AppTest

from pipeline.run.trace import run_trace
from pipeline.stages import attention as ast
from pipeline.stages import layers as la
from pipeline.stages.request import ChatRequest, GenerationOptions

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 240  # the first page also captures the default trace on 2 shared CPU cores




def plotly_count(at: AppTest) -> int:
    return len(at.get("plotly_chart"))



def text_of(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [s.value for s in at.subheader]
    return "\n".join(parts)


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
    assert "−∞" in text_of(at)


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
    assert "Answer so far" in text_of(at)


def test_attention_page(tiny_app):
    at = run_page("attention")
    assert at.title[0].value == "Attention"
    assert plotly_count(at) >= 3  # all-heads overview + T x T heatmap + one row as bars
    for key in ("at_overview", "at_heatmap", "at_row_chart"):
        chart(at, key)
    assert "grouped-query" in text_of(at)
    last = tiny_app.dims.L - 1
    at.slider(key="at_layer").set_value(last).run()
    at.selectbox(key="at_head").set_value(4).run()
    assert not at.exception
    assert f"layer {last}, head 4" in str(chart(at, "at_heatmap").proto)
    ids = prompt_ids(tiny_app)
    weights = chart_data(chart(at, "at_heatmap"))[0]["customdata"]  # the short prompt: the whole T x T grid
    from pipeline.model.prefill import run_prefill

    p, d, T = run_prefill(tiny_app, ids).prefill, tiny_app.dims, len(ids)  # the page's run and HF's pass
    tol = attention_tolerance(p.q_rot[last, 4], p.k_rot[last, d.kv_head(4)], d.Dh ** -0.5, T,
                              forward_tolerance(d, 1.0, T))
    assert_within(np.asarray(weights, dtype=float), hf_forward(tiny_app, ids).attentions[last][0, 4].cpu().numpy(),
                  tol, f"layer {last}, head 4")
    assert "KV head 1" in text_of(at)
    at.selectbox(key="at_row").set_value(3).run()
    assert not at.exception
    assert len(at.dataframe) >= 5  # GQA table + compare, mask, softmax, mix
    assert "Mix" in text_of(at)


def test_embeddings_page(page_lm):
    at = run_page("embeddings")
    assert at.title[0].value == "Embeddings"
    assert plotly_count(at) == 2  # rows heatmap + PCA map
    assert len(at.dataframe) == 2  # neighbours + analogy
    assert at.dataframe[0].value["token"].iloc[0] == "␣tomato"  # the word is its own nearest neighbour
    ids = prompt_ids(page_lm)
    rows = np.asarray(chart_data(chart(at, "em_heatmap"))[0]["z"], dtype=float)  # the prompt's rows, in order
    table = page_lm.model.get_input_embeddings().weight.detach().cpu().numpy()
    want = table[ids[:len(rows)]]  # a lookup: the same values, at most the chart's float32 rounding apart
    assert_within(rows, want, U32 * np.abs(want), "embedding rows")
    at.text_input(key="em_word").set_value("Solanaceae").run()
    assert not at.exception and "mean of their rows" in text_of(at)
    at.text_area(key="em_words").set_value("cat, dog, <s>, <img src=x onerror=alert(1)>").run()
    assert not at.exception
    assert "&lt;img" in str(at.get("plotly_chart")[1].proto)  # escaped for plotly


def test_position_rope_page(tiny_app):
    at = run_page("position")
    assert at.title[0].value == "Position (RoPE)"
    assert plotly_count(at) == 2
    scores = at.dataframe[0].value["score q·k/√Dh"]
    assert scores.nunique() == 1  # identical after every shift (6 decimals)
    at.slider(key="rope_layer").set_value(20).run()
    assert not at.exception and at.dataframe[0].value["score q·k/√Dh"].nunique() == 1


def test_layers_page(tiny_app):
    at = run_page("layers")
    assert at.title[0].value == "Layers"
    assert plotly_count(at) == 4  # norms, cosine, contributions, logit lens
    assert "Logit lens" in text_of(at)
    hidden = hf_forward(tiny_app, prompt_ids(tiny_app)).hidden_states  # L+1 of (1, T, D); the last after the norm
    norms = np.asarray(chart_data(at.get("plotly_chart")[0])[0]["customdata"], dtype=float)  # (L+1, T)
    expected = np.stack([h[0].norm(dim=-1).cpu().numpy() for h in hidden[:-1]])
    # the page's run and HF's pass: each value within the blocks' rounding (kit.tolerance), a norm of D of them
    # within sqrt(D) times that, and the norm's own sum of D squares
    d, T = tiny_app.dims, expected.shape[1]
    stream = np.sqrt(d.D) * forward_tolerance(d, scale(*(h for h in hidden[:-1])), T)
    assert_within(norms[:-1], expected, stream + float32_tolerance(d.D, 1.0) * expected, "norms")
    at.selectbox(key="ly_token").set_value(5).run()
    at.slider(key="ly_positions").set_value(8).run()
    assert not at.exception


LONG_QUESTION = "Tomatoes are fruit. " * 120  # > 512 prompt tokens: no stored attention, float16 captures


def run_long(name: str) -> AppTest:
    at = AppTest.from_file(page_file(name), default_timeout=TIMEOUT)
    at.session_state["req_question"] = LONG_QUESTION
    at.session_state["req_max_new_tokens"] = 2
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def chart_arrays(at: AppTest, index: int | str) -> dict[str, np.ndarray]:
    """{'<trace index>.<z|y|customdata>': values as float} for one plotly chart (by index or key), typed
    arrays decoded."""
    out = {}
    c = chart(at, index) if isinstance(index, str) else at.get("plotly_chart")[index]
    for n, tr in enumerate(json.loads(c.proto.spec)["data"]):
        for field in ("z", "y", "customdata"):
            v = tr.get(field)
            if isinstance(v, dict) and "bdata" in v:  # plotly packs numpy arrays as base64
                out[f"{n}.{field}"] = np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).astype(float)
            elif isinstance(v, list) and v and not isinstance(np.ravel(v)[0], str):
                out[f"{n}.{field}"] = np.asarray(v, dtype=float).ravel()
    return out


def trace_long(lm):
    return run_trace(ChatRequest.from_question(LONG_QUESTION, options=GenerationOptions(max_new_tokens=2)), lm)


@pytest.fixture
def long_trace(tiny_app):
    return trace_long(tiny_app)


def test_long_prompt_layer_analysis_is_finite(lm):
    """float16 captures of the real model's activations stay finite (random small weights could not overflow)."""
    long_trace = trace_long(lm)
    p = long_trace.prefill
    assert len(long_trace.tokens) > 512 and p.attention is None and p.hidden_states.dtype == np.float16
    for name, values in [("norms", la.norms(p.hidden_states)), ("cosine", la.consecutive_cosine(p.hidden_states)),
                         *la.contributions(p.attn_out, p.mlp_out).items()]:
        assert np.isfinite(values).all(), f"{name} has inf/NaN on a long prompt"
    assert np.all(la.consecutive_cosine(p.hidden_states) <= 1 + float32_tolerance(lm.dims.D, 1.0, depth=3))


@pytest.mark.app
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
    start, W, sinks = T - 256, 256, 4  # query rows start..T-1; key columns: 4 first tokens, 1 summed, the window
    C = sinks + 1 + W
    assert "last 256 of T" in str(chart(at, "at_heatmap").proto)
    assert "shows only the last 256" in text_of(at)
    assert f"T = {T:,} tokens" in text_of(at)  # the page traced the same prompt as long_trace
    spec = json.loads(chart(at, "at_heatmap").proto.spec)["data"][0]
    x, y = list(spec["x"]), list(spec["y"])
    assert len(x) == C and len(y) == W and y[0].startswith(f"({start})") and y[-1].startswith(f"({T - 1})")
    assert [c[:3] for c in x[:sinks]] == ["(0)", "(1)", "(2)", "(3)"]  # the first tokens stay as columns
    assert x[sinks] == f"tokens {sinks}–{start - 1}, summed" and x[sinks + 1:] == y  # then the window's keys
    arrays = chart_arrays(at, "at_heatmap")
    heat = arrays["0.z"]  # (256 * 261,) colour values, NaN only for the masked future
    assert heat.size == W * C
    assert np.isfinite(heat).sum() == W * (sinks + 1) + W * (W + 1) // 2  # future masked only in the window
    assert np.nanmin(heat) >= 0 and np.nanmax(heat) <= 1
    weights = arrays["0.customdata"].reshape(W, C)  # the real weights behind the colours
    future = np.isnan(heat.reshape(W, C))
    assert np.all(weights[future] == 0) and np.all(weights >= 0)
    sums = float32_tolerance(T, 1.0, depth=3)  # a softmax's T weights, then their sum here
    assert_within(weights.sum(axis=1), 1.0, sums, "shown keys + summed column: 100 % per row")
    layer, head = at.session_state["at_layer"], at.session_state["at_head"]
    assert (layer, head) == ast.sharpest_head(ast.last_rows(long_trace.prefill))  # opens on the most focused head
    full = ast.attention_for_layer(long_trace.prefill, layer, first_row=start)[head]  # (W, T) every key
    # the page's run and this one: q and k within the blocks' rounding, kept in float16 (kit.tolerance); the
    # summed column adds start - sinks weights, each within that
    p, d = long_trace.prefill, long_trace.dims
    tol = attention_tolerance(p.q_rot[layer, head], p.k_rot[layer, d.kv_head(head)], d.Dh ** -0.5, T,
                              U16 + forward_tolerance(d, 1.0, T))
    assert_within(weights[:, :sinks], full[:, :sinks], tol, "first tokens")
    assert_within(weights[:, sinks], full[:, sinks:start].sum(axis=1), (start - sinks) * tol, "summed column")
    assert_within(weights[:, sinks + 1:], full[:, start:], tol, "the window")
    row = chart_arrays(at, "at_row_chart")["0.y"]  # the last token's row: first tokens, summed column, window
    assert row.size == C and np.isfinite(row).all()
    assert_within(row.sum(), 1.0, sums, "the last row")
    other = (layer + 1) % long_trace.dims.L
    at.slider(key="at_layer").set_value(other).run()
    at.selectbox(key="at_row").set_value(T - 100).run()
    assert not at.exception
    assert f"layer {other}, head {head}" in str(chart(at, "at_heatmap").proto)  # the head stays when the layer moves
    row = chart_arrays(at, "at_row_chart")["0.y"]  # row T - 100: keys up to and including itself
    assert row.size == sinks + 1 + (T - 100 - start + 1)
    assert_within(row.sum(), 1.0, sums, "row T - 100")


def test_what_if_page_shows_the_branch_it_just_made(tiny_app):
    """Continue makes a branch and shows it (the tree's radio once kept 'the original run' selected
    and sent the page straight back to it)."""
    from kit.apptest import page_app

    at = page_app("what_if", req_max_new_tokens=8)
    at.run()
    at.text_input(key="br_typed").input("$*x*$").run()  # a forced token's text is Markdown-escaped where named
    at.button(key="br_go").click().run()
    assert not at.exception
    assert any("this branch" in m.value and "per token" in m.value for m in at.markdown)
    assert at.radio(key="br_tree").value == 1
    named = [c.value for c in at.caption if c.value.startswith("Branching from")]
    assert named and "\\$" in named[0] and "'$" not in named[0], named
    assert all("'$" not in o for o in at.radio(key="br_tree").options)
