"""The Attention page: its three charts, the heatmap's weights against Hugging Face's attentions, and a prompt over 512
tokens shown as a window with the first tokens and a summed column. AppTest runs the page file on its own (no app.py
sidebar), from the session-state defaults in views/request/session.py, on the tiny random-weight model (fixture
`tiny_app`, fast tier).
"""
import json

import numpy as np
import pytest
from kit.apptest import chart, chart_arrays, chart_data, page_text, plotly_count, run_page
from kit.long_prompt import run_long, trace_long
from kit.tiny_models import hf_forward, prompt_ids
from kit.tolerance import U16, assert_within, attention_tolerance, float32_tolerance, forward_tolerance

from pipeline.stages import attention as ast


def test_attention_page(tiny_app):
    at = run_page("attention")
    assert at.title[0].value == "Attention"
    assert plotly_count(at) >= 3  # all-heads overview + T x T heatmap + one row as bars
    for key in ("at_overview", "at_heatmap", "at_row_chart"):
        chart(at, key)
    assert "grouped-query" in page_text(at)
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
    assert "KV head 1" in page_text(at)
    at.selectbox(key="at_row").set_value(3).run()
    assert not at.exception
    assert len(at.dataframe) >= 5  # GQA table + compare, mask, softmax, mix
    assert "Mix" in page_text(at)


@pytest.fixture
def long_trace(tiny_app):
    return trace_long(tiny_app)


def test_attention_page_long_prompt_shows_a_window(long_trace):
    at = run_long("attention")
    T = len(long_trace.tokens)
    assert T > 512
    start, W, sinks = T - 256, 256, 4  # query rows start..T-1; key columns: 4 first tokens, 1 summed, the window
    C = sinks + 1 + W
    assert "last 256 of T" in str(chart(at, "at_heatmap").proto)
    assert "shows only the last 256" in page_text(at)
    assert f"T = {T:,} tokens" in page_text(at)  # the page traced the same prompt as long_trace
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
