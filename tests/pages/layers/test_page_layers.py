"""The Layers page: the residual stream's norms against Hugging Face's hidden states, and a prompt over 512 tokens
(float16 captures) that stays finite on the real model (markers `model`, `app`). AppTest runs the page file on its
own (no app.py sidebar), from the session-state defaults in views/request/session.py, on the tiny random-weight model
(fixture `tiny_app`, fast tier).
"""
import numpy as np
import pytest
from kit.apptest import chart_arrays, chart_data, page_text, plotly_count, run_page
from kit.long_prompt import run_long, trace_long
from kit.tiny_models import hf_forward, prompt_ids
from kit.tolerance import assert_within, float32_tolerance, forward_tolerance, scale

from pipeline.stages import layers as la


def test_layers_page(tiny_app):
    at = run_page("layers")
    assert at.title[0].value == "Layers"
    assert plotly_count(at) == 4  # norms, cosine, contributions, logit lens
    assert "Logit lens" in page_text(at)
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


def test_the_lens_window_slider_names_its_last_position_not_one_past_it(tiny_app):
    from kit.apptest import page_app

    at = page_app("layers")
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    end = at.slider(key="ly_lens_end")
    last = end.value
    assert end.max == last  # the default window ends at the last position, and the slider says its number
    [caption] = [c.value for c in at.caption if c.value.startswith("Positions ")]
    assert caption.split(" of ")[0].endswith(f"–{last}") and caption.split(" of ")[1].startswith(f"{last + 1:,}:")
    end.set_value(last - 3).run()
    [caption] = [c.value for c in at.caption if c.value.startswith("Positions ")]
    assert caption.split(" of ")[0].endswith(f"–{last - 3}")


def test_logit_lens_cells_hold_labels_that_fit_them(tiny_app):
    import html
    import json

    from kit.apptest import page_app

    CELL_CHARS = 80  # views/pages/layers/page.py's (importing a page module runs the page)
    at = page_app("layers")
    at.run()
    at.slider(key="ly_positions").set_value(32).run()
    assert not at.exception, [e.message for e in at.exception]
    [lens] = [c for c in at.get("plotly_chart") if "next: %{customdata}" in c.proto.spec]
    trace = json.loads(lens.proto.spec)["data"][0]
    cells = [html.unescape(c) for row in trace["text"] for c in row]  # as the browser draws them
    fits = CELL_CHARS // 32
    assert cells and max(len(c) for c in cells) <= fits, sorted(cells, key=len)[-3:]
    assert any(len(h) > fits for row in trace["customdata"] for h in row)  # the hover keeps the whole label
