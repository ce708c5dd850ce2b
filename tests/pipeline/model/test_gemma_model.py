"""The real Gemma-3-270M (base), loaded once (`gemma_lm`): greedy answers equal Hugging Face's own
`generate(do_sample=False)` from the same converted weights, on the default question, a Korean one and
a prompt longer than the 512-position sliding window; the captured attention weights equal HF's eager
ones; and in a sliding layer no weight falls further back than the window, while the full layers do
reach back."""
import numpy as np
import pytest
import torch
from kit.texts import DEFAULT_QUESTION, LONG_NOTES
from kit.tolerance import (U16, assert_within, attention_weights_tolerance, float16_storage_tolerance,
                           forward_tolerance)

from pipeline.model.dims import SLIDING
from pipeline.model.prefill import run_prefill
from pipeline.run.trace import run_trace
from pipeline.stages.request import ChatRequest, GenerationOptions
from pipeline.stages.tokens import tokenize_request

pytestmark = pytest.mark.model

STEPS = 8


def hf_greedy(lm, ids: list[int], n: int) -> list[int]:
    x = torch.tensor([ids], device=lm.device)
    with lm.lock, torch.inference_mode():
        out = lm.model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n)
    return out[0, len(ids):].tolist()


def hf_eager_attention(lm, ids: list[int]) -> np.ndarray:
    """(L, H, T, T) from HF's eager kernel, no capture hooks."""
    out = lm.forward([ids], use_cache=False, attention="eager", output_attentions=True)
    return np.stack([a[0].float().cpu().numpy() for a in out.attentions])


@pytest.fixture(scope="module")
def long_ids(gemma_lm):
    ids = tokenize_request(gemma_lm.tokenizer, ChatRequest.from_question(LONG_NOTES)).ids
    assert 512 < len(ids) <= 1024
    return ids


@pytest.mark.parametrize("question", [DEFAULT_QUESTION, "토마토는 과일인가요?", "long"])
def test_greedy_tokens_equal_hf_generate(gemma_lm, question):
    request = ChatRequest.from_question(LONG_NOTES if question == "long" else question,
                                        options=GenerationOptions(max_new_tokens=STEPS))
    trace = run_trace(request, gemma_lm)
    assert trace.tokenized.prompt_text.startswith("<bos><start_of_turn>user\n")
    if question == "long":
        assert len(trace.ids) > 512 and trace.prefill.attention is None  # chunked, past the window
    want = hf_greedy(gemma_lm, trace.ids, STEPS)
    got = trace.generated_token_ids
    assert got == want[:len(got)] and len(got) >= min(len(want), 1)
    assert len(got) == len(want) or want[len(got)] in (1, 106)  # HF writes the stop token; the trace ends on it


def test_captured_attention_equals_hf_eager(gemma_lm):
    ids = tokenize_request(gemma_lm.tokenizer, ChatRequest.from_question(DEFAULT_QUESTION)).ids
    p = run_prefill(gemma_lm, ids).prefill
    # the capture is HF's eager pass with hooks: the same kernels on the same shapes, the same bits
    np.testing.assert_array_equal(p.attention, hf_eager_attention(gemma_lm, ids))
    assert p.k_rot.shape == (18, 1, len(ids), 256) and p.q_rot.shape == (18, 4, len(ids), 256)


def test_no_weight_falls_past_the_window_in_a_sliding_layer(gemma_lm, long_ids):
    d, T = gemma_lm.dims, len(long_ids)
    p = run_prefill(gemma_lm, long_ids, keep_attention=True).prefill  # one eager pass, attention kept
    assert p.attention.dtype == np.float16  # a long prompt's captures are stored compact: half a float16 step
    ref = hf_eager_attention(gemma_lm, long_ids)
    scale = gemma_lm.model.config.query_pre_attn_scalar ** -0.5
    for i in range(d.L):  # the same eager pass, its weights stored in float16 (2^-11 of each)
        tol = attention_weights_tolerance(ref[i], p.q_rot[i], p.k_rot[i], scale, forward_tolerance(d, 1.0, T))
        assert_within(p.attention[i], ref[i], tol + float16_storage_tolerance(ref[i]), f"layer {i} stored in float16")
    back = np.arange(T)[:, None] - np.arange(T)[None, :]  # how far back each key lies from its query
    for i in range(d.L):
        beyond = p.attention[i][:, back >= d.sliding_window]  # (H, n) weights further back than the window
        if d.layer_type(i) == SLIDING:
            assert np.all(beyond == 0), f"layer {i}"
        else:
            assert beyond.sum() > 0, f"full layer {i} never looks past {d.sliding_window} positions"
    assert sorted(set(p.kv_bytes_per_layer)) == [2 * 1 * 256 * 4 * (d.sliding_window - 1), 2 * 256 * 4 * T]


@pytest.mark.parametrize("question", [DEFAULT_QUESTION, "long"])
def test_the_plain_path_equals_hf_generate(gemma_lm, question):
    """The plain serving path's own Gemma decoder (pipeline.model.decoders.gemma) gives HF's greedy tokens,
    on a prompt inside the window and on one past it."""
    from pipeline.faster import fast_path
    from pipeline.model.decoders.factory import open_decoder
    from pipeline.model.decoders.gemma import GemmaPlainDecoder

    n = STEPS
    request = ChatRequest.from_question(LONG_NOTES if question == "long" else question,
                                        options=GenerationOptions(max_new_tokens=n))
    assert isinstance(open_decoder(gemma_lm, 8), GemmaPlainDecoder)
    got = fast_path.generate(gemma_lm, request).generated
    want = hf_greedy(gemma_lm, tokenize_request(gemma_lm.tokenizer, request).ids, n)
    assert got == want[:len(got)] and got
    assert len(got) == len(want) or want[len(got)] in (1, 106)


def test_the_attention_and_kv_pages_numbers_past_the_window(gemma_lm, long_ids):
    """What the Attention and KV cache pages draw for a ~600-token prompt (chunked prefill, no weights kept):
    attention recomputed from the captured q and k with each layer's window equals HF's eager weights, zeros
    past 512 positions in a sliding layer included; and each layer's cache from its real tensors holds 511
    positions in a sliding layer, all T in a full one, beside the calculator's window engine (512 and T)."""
    from pipeline.stages import attention as at
    from pipeline.stages import kv_cache as kv

    d, T = gemma_lm.dims, len(long_ids)
    p = run_prefill(gemma_lm, long_ids).prefill
    assert p.attention is None  # the page recomputes
    ref = hf_eager_attention(gemma_lm, long_ids)  # (L, H, T, T)
    windows = [d.window(i) for i in range(d.L)]
    assert windows.count(None) == 3 and set(windows) == {512, None}
    # q and k from the chunked prefill, stored in float16 (2^-11 each) and from another pass than HF's
    stored = U16 if p.q_rot.dtype == np.float16 else 0.0
    scale = gemma_lm.model.config.query_pre_attn_scalar ** -0.5
    error = stored + forward_tolerance(d, 1.0, T)
    tols = [attention_weights_tolerance(ref[i], p.q_rot[i], p.k_rot[i], scale, error) for i in range(d.L)]
    assert_within(at.last_rows(p, windows), ref[:, :, -1], np.stack([t[:, -1] for t in tols]), "last rows")
    back = np.arange(T - 256, T)[:, None] - np.arange(T)[None, :]  # (256, T) for the page's last 256 rows
    for i in (0, 5):  # a sliding layer and a full one
        got = at.attention_for_layer(p, i, first_row=T - 256, window=windows[i])  # (H, 256, T)
        assert_within(got, ref[i][:, T - 256:], tols[i][:, T - 256:], f"layer {i}")
        assert np.all(got[:, back >= 512] == 0) == (windows[i] is not None)
    rows = kv.layer_holdings(d, p.kv_bytes_per_layer, T)
    assert [r["positions"] for r in rows] == [T if w is None else 511 for w in windows]
    assert [r["window_bytes"] for r in rows] == [2 * 256 * 4 * (T if w is None else 512) for w in windows]
