"""The Attention and KV cache stages on a tiny random-weight Gemma 3 whose first two layers slide over a
window of 4 positions (test_architectures.tiny_gemma3, Gemma's real tokenizer): attention recomputed from
the captured q and k equals what HF's own eager kernel computed (zeros beyond the window included); the
by-hand steps mask what the window hides; the memory calculator adds up min(T, window) positions per layer,
checked against sums worked by hand.
"""
import numpy as np
import pytest

from pipeline.model.dims import FULL, SLIDING
from pipeline.model.prefill import run_prefill
from pipeline.stages import attention as at
from pipeline.stages import kv_cache as kv
from test_architectures import TEXT, WINDOW, gemma_tokenizer, tiny_gemma3, wrap  # noqa: F401 (a fixture)


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


def test_recomputed_attention_keeps_the_sliding_window(tiny_gemma, both_prefills):
    kept, recomputed = both_prefills
    d = tiny_gemma.dims
    windows = [d.window(i) for i in range(d.L)]
    assert windows == [WINDOW, WINDOW, None]
    back = np.arange(kept.T)[:, None] - np.arange(kept.T)[None, :]  # (T, T) query - key
    for i in range(d.L):
        ref = kept.attention[i]  # (H, T, T) HF's eager kernel: the reference
        np.testing.assert_allclose(at.attention_for_layer(recomputed, i, window=windows[i]), ref, atol=1e-5)
        np.testing.assert_allclose(at.attention_for_layer(recomputed, i, first_row=7, window=windows[i]),
                                   ref[:, 7:], atol=1e-5)
        if windows[i]:
            assert np.all(ref[..., back >= WINDOW] == 0) and np.all(ref[..., (back >= 0) & (back < WINDOW)] > 0)
    np.testing.assert_allclose(at.last_rows(recomputed, windows), kept.attention[:, :, -1], atol=1e-5)
    np.testing.assert_allclose(at.overview_tiles(recomputed, 8, windows), kept.attention[:, :, -8:, -8:], atol=1e-5)


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
