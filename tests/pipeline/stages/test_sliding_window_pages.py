"""The Attention and KV cache stages on a tiny random-weight Gemma 3 whose first two layers slide over a
window of 4 positions (test_architectures.tiny_gemma3, Gemma's real tokenizer): attention recomputed from
the captured q and k equals what HF's own eager kernel computed (zeros beyond the window included); the
by-hand steps mask what the window hides; each layer's cache bytes read from HF's tensors match the
positions it keeps; and both pages drawn with the tiny Gemma as the app's model show the layer kinds, the
cells outside the window, one KV head for four query heads, and each layer's positions held.
"""
import numpy as np
import pytest
from kit.tiny_models import TEXT, WINDOW, tiny_gemma3, wrap
from kit.tolerance import assert_within, attention_tolerance, float32_tolerance, forward_tolerance

from pipeline.core.errors import InputError
from pipeline.model.prefill import run_prefill
from pipeline.stages import attention as at
from pipeline.stages import kv_cache as kv


@pytest.fixture(scope="module")
def tiny_gemma(gemma_tokenizer):  # noqa: F811
    return wrap(tiny_gemma3(gemma_tokenizer), gemma_tokenizer, "tiny-gemma3")


@pytest.fixture(scope="module")
def both_prefills(tiny_gemma):
    """The same prompt captured twice: with HF's eager attention weights kept, and without them (what a
    prompt longer than FULL_ATTENTION_MAX_TOKENS gets: the page recomputes from q and k)."""
    ids = tiny_gemma.tokenizer(TEXT)["input_ids"]
    kept = run_prefill(tiny_gemma, ids, keep_attention=True).prefill
    recomputed = run_prefill(tiny_gemma, ids, keep_attention=False).prefill
    assert kept.attention is not None and recomputed.attention is None and kept.T > 3 * WINDOW
    return kept, recomputed


def recomputed_tolerance(lm, p) -> float:
    """Attention recomputed from one pass's q and k against HF's eager weights from another pass (kit.tolerance)."""
    scale = lm.model.config.query_pre_attn_scalar ** -0.5
    return attention_tolerance(p.q_rot, p.k_rot, scale, p.T, forward_tolerance(lm.dims, 1.0, p.T))


def test_recomputed_attention_keeps_the_sliding_window(tiny_gemma, both_prefills):
    kept, recomputed = both_prefills
    d = tiny_gemma.dims
    windows = [d.window(i) for i in range(d.L)]
    assert windows == [WINDOW, WINDOW, None]
    back = np.arange(kept.T)[:, None] - np.arange(kept.T)[None, :]  # (T, T) query - key
    tol = recomputed_tolerance(tiny_gemma, recomputed)
    for i in range(d.L):
        ref = kept.attention[i]  # (H, T, T) HF's eager kernel: the reference
        assert_within(at.attention_for_layer(recomputed, i, window=windows[i]), ref, tol, f"layer {i}")
        assert_within(at.attention_for_layer(recomputed, i, first_row=7, window=windows[i]), ref[:, 7:], tol,
                      f"layer {i} from row 7")
        if windows[i]:
            assert np.all(ref[..., back >= WINDOW] == 0) and np.all(ref[..., (back >= 0) & (back < WINDOW)] > 0)
    assert_within(at.last_rows(recomputed, windows), kept.attention[:, :, -1], tol, "last rows")
    assert_within(at.overview_tiles(recomputed, 8, windows), kept.attention[:, :, -8:, -8:], tol, "tiles")


def test_one_head_and_the_whole_grid_shrunk(tiny_gemma, both_prefills):
    kept, recomputed = both_prefills
    T = kept.T
    tol = recomputed_tolerance(tiny_gemma, recomputed)
    for p in (kept, recomputed):
        one = at.attention_for_layer(p, 1, first_row=3, window=WINDOW, head=2)
        assert_within(one, kept.attention[1][2:3, 3:], tol, "one head")
    b = 3  # blocks of 3 positions: cells = ceil(T / 3)
    pooled, hidden, starts = at.pooled_head(recomputed, 0, 2, WINDOW, cells=-(-T // b))
    assert starts.tolist() == list(range(0, T, b))
    ref = kept.attention[0][2].astype(np.float64)  # (T, T) HF's eager weights
    for i, qs in enumerate(starts):
        for j, ks in enumerate(starts):
            block = ref[qs:qs + b, ks:ks + b]
            assert pooled[i, j] == pytest.approx(block.sum(axis=1).mean(), abs=b * tol)  # b weights a row
            q, k = np.arange(qs, min(qs + b, T))[:, None], np.arange(ks, min(ks + b, T))[None, :]
            assert hidden[i, j] == bool(np.all((k > q) | (q - k >= WINDOW)))
    assert_within(pooled.sum(axis=1), 1.0, float32_tolerance(T, 1.0, depth=3), "pooled rows")  # T weights a row
    assert hidden[-1, 0] and not hidden[-1, -1]  # the band: the last queries' oldest keys are out of reach


def test_attention_by_hand_masks_what_the_window_hides(both_prefills):
    kept, _ = both_prefills
    layer, pos = 0, [0, 5, 6, 9]  # 9 - 5 = 4 is out of a window of 4; 9 - 6 = 3 is in
    r = at.attention_by_hand(kept.q_rot[layer], kept.k_rot[layer], kept.v[layer], 2, pos, window=WINDOW)
    hidden = np.isneginf(r["masked"])
    assert hidden.tolist() == [[False, True, True, True],
                               [True, False, True, True],  # 5 - 0 = 5: out
                               [True, False, False, True],  # 6 - 5 = 1: in
                               [True, True, False, False]]
    assert np.all(r["weights"][hidden] == 0)
    np.testing.assert_allclose(r["weights"].sum(axis=1), 1)
    full = at.attention_by_hand(kept.q_rot[layer], kept.k_rot[layer], kept.v[layer], 2, pos)
    assert np.isneginf(full["masked"]).sum() == 6  # a full layer hides only the future


def test_hidden_keys_and_the_words_for_heads_and_layers():
    assert at.hidden_keys([600], [0, 88, 89, 600, 601], 512).tolist() == [[True, True, False, False, True]]
    assert at.hidden_keys([3], [0, 3, 4], None).tolist() == [[False, False, True]]
    assert [at.kv_sharing(9, 3), at.kv_sharing(4, 1), at.kv_sharing(8, 8)] == \
        ["grouped-query", "multi-query", "multi-head"]
    assert [at.layer_kind(None), at.layer_kind(512)] == ["full", "sliding 512"]


@pytest.fixture(scope="module")
def tiny_trace(tiny_gemma):
    from pipeline.run.trace import run_trace
    from pipeline.stages.request import ChatRequest, GenerationOptions

    return run_trace(ChatRequest.from_question(TEXT, options=GenerationOptions(max_new_tokens=3)), tiny_gemma)


def test_each_layers_cache_from_its_real_tensors(tiny_gemma, tiny_trace):
    d, T = tiny_gemma.dims, len(tiny_trace.ids)
    per = 2 * 1 * 16 * 4  # 2 (K and V) * Hkv 1 * Dh 16 * float32
    assert kv.position_bytes(d) == per
    measured = tiny_trace.prefill.kv_bytes_per_layer  # read from HF's cache tensors after prefill
    assert measured == [(WINDOW - 1) * per, (WINDOW - 1) * per, T * per]  # HF keeps window - 1 in a sliding layer
    assert kv.held_bytes(d, T) == measured
    for step in tiny_trace.steps:
        assert kv.held_bytes(d, step.kv_cache_tokens) == step.kv_bytes_per_layer
    rows = kv.layer_holdings(d, measured, T)
    assert [(r["window"], r["positions"]) for r in rows] == [(WINDOW, WINDOW - 1), (WINDOW, WINDOW - 1), (None, T)]
    assert [r["window_bytes"] for r in rows] == [WINDOW * per, WINDOW * per, T * per]  # the calculator's engine
    assert {r["all_positions_bytes"] for r in rows} == {T * per}
    with pytest.raises(InputError, match="measured"):
        kv.layer_holdings(d, measured[:2], T)


@pytest.fixture()
def gemma_pages(tiny_app, tiny_app_gemma):
    """Pages drawn with Gemma picked in the sidebar, through the app's own path: the tiny Gemma 3 (the same
    seed and config as `tiny_gemma`) saved as Gemma's converted weights (conftest's `tiny_app_gemma`)."""
    if tiny_app_gemma is None:
        pytest.skip("Gemma's tokenizer is not converted yet: ./run.sh converts it")

    def run(view: str, **state):
        from kit.apptest import page_app

        at = page_app(view, req_model="gemma-3-270m", req_max_new_tokens=3, **state)
        at.run()
        assert not at.exception, [e.message for e in at.exception]
        return at
    return run


def default_prompt_tokens(lm) -> int:
    """Tokens of the request a page draws when nobody chose one (the default question)."""
    from kit.texts import DEFAULT_QUESTION

    from pipeline.stages.request import ChatRequest
    from pipeline.stages.tokens import tokenize_request

    return len(tokenize_request(lm.tokenizer, ChatRequest.from_question(DEFAULT_QUESTION)).ids)


def _chart(at, key):
    import json

    (c,) = [c for c in at.get("plotly_chart") if c.key == key]
    return json.loads(c.proto.spec)


def _array(v) -> np.ndarray:
    """A plotly array as float: a plain list, or numpy packed as base64 ({'bdata', 'dtype', 'shape'})."""
    import base64

    if isinstance(v, dict):
        out = np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).astype(float)
        return out.reshape([int(n) for n in str(v["shape"]).split(",")]) if "shape" in v else out
    return np.array([[np.nan if x is None else x for x in row] for row in v], dtype=float)


def _text(at) -> str:
    return "\n".join([m.value for m in at.markdown] + [c.value for c in at.caption] + [s.value for s in at.subheader])


def test_attention_page_on_gemma_shows_layer_kinds_the_window_and_one_kv_head(gemma_pages, tiny_gemma):
    at = gemma_pages("attention")
    T = default_prompt_tokens(tiny_gemma)
    over = _chart(at, "at_overview")
    assert over["layout"]["xaxis"]["ticktext"] == [f"0<br>win {WINDOW}", f"1<br>win {WINDOW}", "2<br>full"]
    assert len(over["layout"]["yaxis"]["ticktext"]) == 4  # H = 4 query heads
    text = _text(at)
    assert "Shared keys and values (multi-query attention)" in text and "all 4 query heads share" in text
    assert f"only the last {WINDOW:,} positions" in text and "use full attention and read every earlier token" in text
    at.slider(key="at_layer").set_value(0).run()
    assert not at.exception
    spec = _chart(at, "at_heatmap")
    assert "sliding window of 4" in spec["layout"]["title"]["text"]
    z = _array(spec["data"][0]["z"])  # (T, T) colour values, NaN where masked
    weights = _array(spec["data"][0]["customdata"]).reshape(T, T)  # the real weights
    back = np.arange(T)[:, None] - np.arange(T)[None, :]
    assert np.all(weights[back >= WINDOW] == 0) and np.all(weights[(back >= 0) & (back < WINDOW)] > 0)
    beyond = _array(spec["data"][2]["z"]).reshape(T, T)  # the yellow layer: 1 exactly outside the window
    np.testing.assert_array_equal(~np.isnan(beyond), back >= WINDOW)
    assert np.isnan(z.reshape(T, T)[back >= WINDOW]).all()
    assert np.isfinite(z.reshape(T, T)[(back >= 0) & (back < WINDOW)]).all()
    assert "weight is exactly 0 %" in _text(at)


def test_kv_cache_page_on_gemma_shows_each_layers_positions(gemma_pages, tiny_gemma):
    at = gemma_pages("kv_cache")
    T = default_prompt_tokens(tiny_gemma)
    table = at.dataframe[0].value
    assert list(table["positions held"]) == [WINDOW - 1, WINDOW - 1, T]
    assert list(table["attention"]) == [f"sliding window {WINDOW}", f"sliding window {WINDOW}", "full"]
    assert list(table["keeping the window"]) == [WINDOW * 128, WINDOW * 128, T * 128]
    text = _text(at)
    assert "Hugging Face's cache drops those" in text and "here they differ" in text


def test_a_long_prompt_on_gemma_shows_the_band_of_the_whole_grid(gemma_pages, tiny_gemma):
    at = gemma_pages("attention", req_question=TEXT * 12, at_layer=0)  # > 256 tokens: the last 256 rows drawn
    spec = _chart(at, "at_shrunk")  # the whole grid, pooled; open in a sliding layer
    pooled, outside = _array(spec["data"][0]["customdata"]), _array(spec["data"][2]["z"])
    n = int(np.sqrt(pooled.size))
    pooled, outside = pooled.reshape(n, n), outside.reshape(n, n)
    assert np.all(pooled[~np.isnan(outside)] == 0) and not np.isnan(outside[-1, 0]) and np.isnan(outside[-1, -1])
    T = len(tiny_gemma.tokenizer(TEXT * 12)["input_ids"]) + 32  # the question's tokens and its chat template's
    assert_within(pooled.sum(axis=1), 1.0, float32_tolerance(T, 1.0, depth=3), "pooled rows")  # T weights a row
    assert "Yellow blocks lie 4 or more positions back" in _text(at)
    heat = _chart(at, "at_heatmap")
    assert "yellow = outside the window" in heat["layout"]["title"]["text"]
