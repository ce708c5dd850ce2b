"""The stages' maths on small arrays worked by hand or by brute force, and the capture machinery on the
tiny random-weight Llama (fast tier: no model weights)."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from kit.tolerance import (U32, abs_dot, additions_tolerance, assert_same_best, assert_within, attention_tolerance,
                           float64_tolerance, lens_tolerance, logits_tolerance, rope_tolerance)

from pipeline.model.capture import block_names, capture, hook_points
from pipeline.model.prefill import run_prefill, top_per_position
from pipeline.stages import embeddings as es
from pipeline.stages import layers as la
from pipeline.stages import position as rope
from pipeline.stages.attention import attention_by_hand, attention_for_layer
from pipeline.stages.batch import batch_tensors, decode_step_tensors, describe, padding_share


def brute_attention(q, k):
    """(H, T, Dh), (Hkv, T, Dh) -> (H, T, T): row by row, key by key, in plain Python loops."""
    H, T, Dh = q.shape
    out = np.zeros((H, T, T))
    for h in range(H):
        kh = k[h // (H // k.shape[0])]
        for i in range(T):
            scores = [float(q[h, i] @ kh[j]) / np.sqrt(Dh) for j in range(i + 1)]
            e = np.exp(np.array(scores) - max(scores))
            out[h, i, :i + 1] = e / e.sum()
    return out


def test_batch_tensors_by_hand():
    t = batch_tensors([[5, 6, 7], [8, 9]], pad_id=0)
    assert t["input_ids"].tolist() == [[5, 6, 7], [0, 8, 9]]
    assert t["attention_mask"].tolist() == [[1, 1, 1], [0, 1, 1]]
    assert t["position_ids"].tolist() == [[0, 1, 2], [0, 0, 1]]
    right = batch_tensors([[5, 6, 7], [8, 9]], pad_id=0, left_pad=False)
    assert right["input_ids"].tolist() == [[5, 6, 7], [8, 9, 0]]
    assert right["position_ids"].tolist() == [[0, 1, 2], [0, 1, 1]]
    assert describe(t)["input_ids"] == {"values": [[5, 6, 7], [0, 8, 9]], "shape": [2, 3], "dtype": "int64"}
    assert padding_share([[1, 2, 3], [4]]) == (2, 6)
    d = decode_step_tensors(5, 42)
    assert (d["input_ids"], d["position_ids"], d["attention_mask"]) == ([[42]], [[5]], [[1] * 6])


def test_rope_by_hand():
    np.testing.assert_allclose(rope.inv_freq(4, 100), [1.0, 0.1])
    a = rope.angles([0, 1, 10], 4, 100)
    np.testing.assert_allclose(a, [[0, 0], [1, 0.1], [10, 1]])
    x = np.array([[1.0, 0.0, 0.0, 0.0]])  # dimension 0 pairs with dimension 2
    np.testing.assert_allclose(rope.rotate(x, [1], 100), [[np.cos(1), 0, np.sin(1), 0]], atol=1e-12)
    rng = np.random.default_rng(0)
    v = rng.normal(size=(3, 5, 8))
    np.testing.assert_allclose(rope.unrotate(rope.rotate(v, np.arange(5), 1e4), np.arange(5), 1e4), v, atol=1e-12)
    q, k = rng.normal(size=8), rng.normal(size=8)
    scores = rope.shifted_scores(q, k, 9, 4, [0, 3, 100, 5000], 1e4)
    np.testing.assert_allclose(scores, scores[0], atol=1e-9)  # only the distance matters
    by_distance = rope.score_by_distance(q, k, [5, 0], 1e4)
    np.testing.assert_allclose(by_distance[0], scores[0], atol=1e-9)
    assert abs(by_distance[1] - q @ k / np.sqrt(8)) < 1e-12  # distance 0: no rotation left between them


def test_attention_for_layer_recomputes_the_brute_force_pattern():
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(2, 4, 7, 8)).astype(np.float32), rng.normal(size=(2, 2, 7, 8)).astype(np.float32)
    prefill = SimpleNamespace(attention=None, q_rot=q, k_rot=k)
    ref = brute_attention(q[1].astype(np.float64), k[1].astype(np.float64))
    tol = attention_tolerance(q[1], k[1], 8 ** -0.5, 7)  # ours float32, the reference float64
    assert_within(attention_for_layer(prefill, 1), ref, tol, "every row")
    assert_within(attention_for_layer(prefill, 1, first_row=4), ref[:, 4:], tol, "from row 4")


def test_attention_by_hand_on_chosen_positions():
    rng = np.random.default_rng(2)
    q, k, v = rng.normal(size=(4, 9, 8)), rng.normal(size=(2, 9, 8)), rng.normal(size=(2, 9, 8))
    out = attention_by_hand(q, k, v, head=3, positions=[7, 1, 4])
    assert out["positions"].tolist() == [1, 4, 7] and out["kv_head"] == 1
    ref = brute_attention(q[3:4, [1, 4, 7]], k[1:2, [1, 4, 7]])[0]
    # float64 both: scores of 8 terms (|q| |k| / sqrt(8) bounds them), a softmax of 3, a mix of 3 values
    score = float64_tolerance(8, np.linalg.norm(q[3], axis=-1).max() * np.linalg.norm(k[1], axis=-1).max() / 8 ** 0.5)
    assert_within(out["weights"], ref, 2 * score + float64_tolerance(3, 1.0, depth=2), "weights")
    assert np.isneginf(out["masked"][np.triu_indices(3, 1)]).all()
    values = v[1, [1, 4, 7]]
    assert_within(out["mixed"], ref @ values, float64_tolerance(3, abs_dot(ref, values.T), depth=2), "mixed")


def test_layer_statistics_by_hand():
    h = np.array([[[3.0, 4.0]], [[4.0, 3.0]], [[-4.0, -3.0]]])  # (L+1=3, T=1, D=2)
    np.testing.assert_allclose(la.norms(h), [[5], [5], [5]])
    np.testing.assert_allclose(la.consecutive_cosine(h), [[24 / 25], [-1]])
    big = np.full((2, 1, 4), 30_000, dtype=np.float16)  # squaring overflows float16: computed in float32
    assert np.isfinite(la.norms(big)).all() and np.allclose(la.norms(big), 60_000)
    c = la.contributions(np.array([[[3.0, 4.0]]]), np.array([[[0.0, 2.0]]]))
    assert c["attention"].tolist() == [[5.0]] and c["mlp"].tolist() == [[2.0]]


def test_pca_2d_explains_variance():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 50)) + np.outer(np.arange(12), np.ones(50))  # one strong direction
    coords, share = es.pca_2d(x)
    assert coords.shape == (12, 2) and share[0] > 0.5 and share[0] >= share[1]
    eig = np.sort(np.linalg.eigvalsh(np.cov(x, rowvar=False)))[::-1]  # the covariance's spectrum, independently
    np.testing.assert_allclose(share, eig[:2] / eig.sum(), rtol=1e-6)
    np.testing.assert_allclose(np.var(coords, axis=0, ddof=1), eig[:2], rtol=1e-6)
    one, one_share = es.pca_2d(x[:1])
    assert one.shape == (1, 2) and one_share.shape == (2,)
    assert es.parse_words("a, b\nc,, a") == ["a", "b", "c"]


def test_word_vectors_on_the_tokenizer(tokenizer):
    table = np.random.default_rng(0).normal(size=(len(tokenizer), 6)).astype(np.float32)
    wv = es.word_vector(tokenizer, table, "Solanaceae")
    assert wv.split and wv.ids == tokenizer(" Solanaceae", add_special_tokens=False)["input_ids"]
    np.testing.assert_allclose(wv.vector, table[wv.ids].mean(axis=0), atol=1e-6)
    unit = es.unit_rows(table)
    _, top = es.neighbours(unit, tokenizer, table, "tomato", k=3)
    sims = unit @ (table[top[0]["id"]] / np.linalg.norm(table[top[0]["id"]]))
    assert top[0]["id"] == es.word_vector(tokenizer, table, "tomato").ids[0] and int(np.argmax(sims)) == top[0]["id"]


# ---- capture and prefill on the tiny model --------------------------------------------------------
def test_hook_names_are_pinned_on_any_llama(tiny_lm):
    names = list(hook_points(tiny_lm.model))
    per_block = ["q", "k", "v", "attention", "attn_out", "mlp_out", "hidden_states"]
    expected = ["embeddings", "rope.cos", "rope.sin"]
    expected += [f"blocks.{i}.{n}" for i in range(tiny_lm.dims.L) for n in per_block] + ["final_norm"]
    assert names == expected
    assert block_names(2, "q") == ["blocks.0.q", "blocks.1.q"]
    with pytest.raises(KeyError):
        with capture(tiny_lm, ["blocks.0.attn.k"]):  # an old name is refused, not silently empty
            pass


def test_hooks_are_removed_even_on_error(tiny_lm):
    modules = [tiny_lm.model.model.embed_tokens, tiny_lm.model.model.layers[0]]
    before = [dict(m._forward_hooks) for m in modules]  # transformers keeps hooks of its own
    with pytest.raises(RuntimeError):
        with capture(tiny_lm, ["embeddings", "blocks.0.hidden_states"]):
            assert [len(m._forward_hooks) for m in modules] == [len(b) + 1 for b in before]
            raise RuntimeError("boom")
    assert [dict(m._forward_hooks) for m in modules] == before


def test_prefill_on_the_tiny_model(tiny_lm):
    ids = tiny_lm.tokenizer("Are tomatoes fruit? Botanically, yes.")["input_ids"]
    run = run_prefill(tiny_lm, ids)
    p, last = run.prefill, run.last_logits
    d = tiny_lm.dims
    T = len(ids)
    assert p.hidden_states.shape == (d.L + 1, T, d.D) and p.attention.shape == (d.L, d.H, T, T)
    assert p.q_rot.shape == (d.L, d.H, T, d.Dh) and p.k_rot.shape == (d.L, d.Hkv, T, d.Dh)
    with torch.inference_mode():
        full = tiny_lm.model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
    assert_within(last, full.float(), logits_tolerance(tiny_lm, ids), "last logits")  # the capture's pass and this
    assert_within(p.attention[1], brute_attention(p.q_rot[1].astype(np.float64), p.k_rot[1].astype(np.float64)),
                  attention_tolerance(p.q_rot[1], p.k_rot[1], d.Dh ** -0.5, T), "layer 1's attention")
    lens_ids, _ = la.logit_lens(tiny_lm, p.hidden_states, k=1, chunk_rows=5)
    top_ids, top_logits, _ = top_per_position(tiny_lm, p.final_norm)
    assert_same_best(lens_ids[-1, :, 0], top_ids[:, 0], top_logits[:, :2], lens_tolerance(tiny_lm, p.final_norm))
    assert tiny_lm.model.config._attn_implementation == "sdpa"  # the eager capture put the kernel back
    assert sum(p.kv_bytes_per_layer) == d.kv_bytes(T)
    assert run.kv_cache.get_seq_length() == T  # the decode continues after the whole prompt


def test_residual_stream_identity(tiny_lm):
    """The one check of the residual stream (the capture code is the same on every Llama): the stream after
    block i is the stream before it plus that block's attention output plus its MLP output, and the stream
    starts at the embeddings. Each term is far above the tolerance, so a capture that drops one fails."""
    p = run_prefill(tiny_lm, tiny_lm.tokenizer("Are tomatoes fruit? Botanically, yes.")["input_ids"]).prefill
    np.testing.assert_array_equal(p.hidden_states[0], p.embeddings)
    h = p.hidden_states.astype(np.float64)
    for i in range(tiny_lm.dims.L):
        # the block's two float32 additions, each rounded to nearest: half an ulp of each result; exact in float64
        tol = additions_tolerance(p.hidden_states[i] + p.attn_out[i], p.hidden_states[i + 1])
        assert np.abs(p.attn_out[i]).max() > 100 * tol.max() and np.abs(p.mlp_out[i]).max() > 100 * tol.max()
        assert_within(h[i + 1], h[i] + p.attn_out[i] + p.mlp_out[i], tol, f"block {i}")


def test_one_rope_equals_hf_to_the_bit_on_torch_and_numpy(tiny_lm):
    """pipeline.model.rope against HF's own apply_rotary_pos_emb and rotary embedding module."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    from pipeline.model import rope as one_rope

    d, P = tiny_lm.dims, 7
    rotary = tiny_lm.model.model.rotary_emb
    with torch.inference_mode():
        cos, sin = rotary(torch.empty(0), torch.arange(P)[None])  # (1, P, Dh) HF's tables
    q, k = torch.randn(1, d.H, P, d.Dh), torch.randn(1, d.Hkv, P, d.Dh)
    hf_q, hf_k = apply_rotary_pos_emb(q, k, cos, sin)
    ours_cos, ours_sin = one_rope.model_tables(rotary, P, "cpu", torch.float32)  # (P, Dh)
    assert torch.equal(one_rope.rotate(q, ours_cos, ours_sin), hf_q)  # same bits
    assert torch.equal(one_rope.rotate(k, cos[0], one_rope.signed_sin(sin[0])), hf_k)
    np_cos, np_sin = one_rope.cos_sin(np.arange(P), d.Dh, d.rope_base)  # float64, from the base alone
    angle = U32 * (2 * P + 4)  # HF's float32 angle p f (off by 2 u p at most) and its cos and sin (u each)
    assert_within(np_cos, cos[0].numpy(), angle, "cos")
    assert_within(np_sin, sin[0].numpy(), angle, "sin")
    as_np = one_rope.rotate(q.numpy().astype(np.float64), np_cos, one_rope.signed_sin(np_sin))
    assert_within(as_np, hf_q.numpy(), rope_tolerance(q, P), "rotated in float64 and by HF")
    np.testing.assert_array_equal(rope.rotate(q.numpy(), np.arange(P), d.rope_base), as_np)  # the stage's is this one
