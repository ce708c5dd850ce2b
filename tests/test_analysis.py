"""Analysis invariants on the real SmolLM2 capture: RoPE, logit lens, residual stream, embeddings,
sampling. Nothing is hard-coded: every expected value comes from the model or from maths."""
import numpy as np
import pytest
import torch

from pipeline.model.prefill import top_per_position
from pipeline.stages import embeddings as es
from pipeline.stages import layers as la
from pipeline.stages import position as rope
from pipeline.stages.attention import attention_by_hand, attention_for_layer
from pipeline.stages.next_token import draw, empirical, final_probs
from pipeline.stages.request import GenerationOptions
from pipeline.text.token_names import token_text

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def trace(default_trace):
    return default_trace


@pytest.fixture(scope="module")
def table(lm):
    return lm.model.get_input_embeddings().weight.detach().float().cpu().numpy()  # (V, D)


def test_rope_matches_the_model(lm, trace):
    """Our rotation with the real base reproduces the captured post-RoPE q from the model's own
    pre-RoPE projection (input norm + q_proj of the residual stream)."""
    layer = 4
    block = lm.model.model.layers[layer]
    with torch.inference_mode():
        x = torch.from_numpy(trace.prefill.hidden_states[layer]).to(lm.device)  # (T, D)
        q = block.self_attn.q_proj(block.input_layernorm(x)).cpu().numpy()  # (T, H*Dh)
    H, Dh = trace.dims.H, trace.dims.Dh
    T = x.shape[0]
    q = q.reshape(T, H, Dh).transpose(1, 0, 2)  # (H, T, Dh)
    ours = rope.rotate(q, np.arange(T), trace.dims.rope_base)
    np.testing.assert_allclose(ours, trace.prefill.q_rot[layer], atol=1e-4)
    np.testing.assert_allclose(rope.unrotate(trace.prefill.q_rot[layer], np.arange(T), trace.dims.rope_base),
                               q, atol=1e-4)


def test_rope_score_depends_only_on_distance(trace):
    base = trace.dims.rope_base
    q, k = rope.pre_rope(trace.prefill, layer=10, q_head=4, kv_head=1, base=base)  # (T, Dh) each
    i, j = len(trace.tokens) - 1, 5
    scores = rope.shifted_scores(q[i], k[j], i, j, [0, 1, 7, 100, 3000], base)
    np.testing.assert_allclose(scores, scores[0], rtol=1e-9, atol=1e-9)
    # shift 0 is the model's own (pre-softmax) score
    own = trace.prefill.q_rot[10, 4, i] @ trace.prefill.k_rot[10, 1, j] / np.sqrt(q.shape[-1])
    assert abs(scores[0] - own) < 1e-3
    # ... while changing the distance does change the score
    by_distance = rope.score_by_distance(q[i], k[j], np.arange(0, 40), base)
    assert np.ptp(by_distance) > 1e-2


def test_angles_use_the_real_base(trace):
    base, Dh = trace.dims.rope_base, trace.dims.Dh
    a = rope.angles([0, 1, 10], Dh, base)  # (3, Dh/2)
    assert a.shape == (3, Dh // 2)
    assert a[0].max() == 0 and a[1, 0] == 1.0
    assert np.isclose(a[1, -1], base ** (-(Dh - 2) / Dh))


def test_logit_lens_last_layer_is_the_models_own_prediction(lm, trace):
    ids, probs = la.logit_lens(lm, trace.prefill.hidden_states, k=1, chunk_rows=7)  # small chunks on purpose
    L = trace.dims.L
    assert ids.shape == (L + 1, len(trace.tokens), 1)
    assert ids[-1, -1, 0] == int(np.argmax(trace.prefill.last_logits))
    top_ids, _, top_probs = top_per_position(lm, trace.prefill.final_norm)  # the head over the captured final norm
    np.testing.assert_array_equal(ids[-1, :, 0], top_ids[:, 0])
    np.testing.assert_allclose(probs[-1, :, 0], top_probs[:, 0], rtol=1e-3)
    assert ids[-1, -1, 0] == trace.generated_token_ids[0]  # greedy run: the first answer token


def test_layer_statistics_equal_an_independent_computation(trace):
    p = trace.prefill
    L, T = trace.dims.L, len(trace.tokens)
    h = torch.from_numpy(p.hidden_states).double()  # (L+1, T, D)
    norms = la.norms(p.hidden_states)
    assert norms.shape == (L + 1, T)
    np.testing.assert_allclose(norms, torch.linalg.vector_norm(h, dim=-1).numpy(), rtol=1e-5)
    cos = la.consecutive_cosine(p.hidden_states)
    ref = torch.nn.functional.cosine_similarity(h[:-1], h[1:], dim=-1).numpy()  # (L, T)
    assert cos.shape == (L, T)
    np.testing.assert_allclose(cos, ref, atol=1e-5)


def test_contributions_match_the_models_own_projections(lm, trace):
    """Reference from a fresh, hook-free-of-ours forward pass: the attention block's write is the output of
    its o_proj and the MLP's write the output of its down_proj; their sum is the change in hidden_states."""
    writes = {"attn": [], "mlp": []}
    handles = []
    try:
        for block in lm.model.model.layers:
            handles.append(block.self_attn.o_proj.register_forward_hook(
                lambda _m, _i, out: writes["attn"].append(out[0].double())))
            handles.append(block.mlp.down_proj.register_forward_hook(
                lambda _m, _i, out: writes["mlp"].append(out[0].double())))
        with torch.inference_mode():
            ids = torch.tensor([trace.ids], device=lm.device)
            hidden = lm.model(ids, output_hidden_states=True).hidden_states  # L+1 x (1, T, D)
    finally:
        for h in handles:
            h.remove()
    L = trace.dims.L
    attn, mlp = torch.stack(writes["attn"]), torch.stack(writes["mlp"])  # (L, T, D) each
    assert attn.shape[0] == L
    # the two writes are what each block adds (HF's last hidden state is after the final norm: skip it)
    for i in range(L - 1):
        delta = hidden[i + 1][0].double() - hidden[i][0].double()  # (T, D)
        torch.testing.assert_close(delta, attn[i] + mlp[i], rtol=0, atol=2e-3)
    c = la.contributions(trace.prefill.attn_out, trace.prefill.mlp_out)
    for part, writes in (("attention", attn), ("mlp", mlp)):
        norms = torch.linalg.vector_norm(writes, dim=-1).cpu().numpy()  # (L, T)
        np.testing.assert_allclose(c[part], norms, rtol=1e-3, atol=1e-3)


def test_attention_by_hand_matches_the_model_on_the_full_row(trace):
    p, layer, head = trace.prefill, 3, 5
    T = len(trace.tokens)
    every = attention_by_hand(p.q_rot[layer], p.k_rot[layer], p.v[layer], head, range(T))
    np.testing.assert_allclose(every["weights"], attention_for_layer(p, layer)[head], atol=1e-5)
    four = attention_by_hand(p.q_rot[layer], p.k_rot[layer], p.v[layer], head, [2, 9, 20, T - 1])
    assert four["kv_head"] == head // 3
    assert np.all(np.isneginf(four["masked"][np.triu_indices(4, 1)]))
    np.testing.assert_allclose(four["weights"].sum(-1), 1.0)
    np.testing.assert_allclose(four["mixed"], four["weights"] @ p.v[layer, head // 3, [2, 9, 20, T - 1]], atol=1e-6)


def test_neighbours_are_real_tokens_and_the_word_is_its_own_nearest(lm, table):
    unit = es.unit_rows(table)
    for word in ("tomato", "king", "red"):
        wv, top = es.neighbours(unit, lm.tokenizer, table, word, k=5)
        assert not wv.split, f"{word} should be one token with a leading space"
        assert top[0]["id"] == wv.ids[0] and abs(top[0]["cosine"] - 1) < 1e-5
        for row in top:
            assert 0 <= row["id"] < len(table)
            assert row["text"] == token_text(lm.tokenizer, row["id"])
            v, w = table[row["id"]].astype(np.float64), wv.vector.astype(np.float64)
            assert abs(row["cosine"] - v @ w / (np.linalg.norm(v) * np.linalg.norm(w))) < 1e-5
        assert [r["cosine"] for r in top] == sorted((r["cosine"] for r in top), reverse=True)


def test_multi_token_word_uses_the_mean(lm, table):
    wv = es.word_vector(lm.tokenizer, table, "Solanaceae")
    assert wv.split
    np.testing.assert_allclose(wv.vector, table[wv.ids].mean(axis=0), atol=1e-6)


def test_analogy_returns_real_top_results(lm, table):
    unit = es.unit_rows(table)
    inputs, top = es.analogy(unit, lm.tokenizer, table, "king", "man", "woman", k=5)
    input_ids = {i for w in inputs for i in w.ids}
    assert len(top) == 5 and not input_ids & {r["id"] for r in top}
    # recompute the best result by brute force
    t = sum(s * w.vector / np.linalg.norm(w.vector) for s, w in zip((1, -1, 1), inputs))
    sims = unit @ (t / np.linalg.norm(t))
    sims[list(input_ids)] = -np.inf
    assert top[0]["id"] == int(np.argmax(sims))


def test_sampling_histogram_matches_theory(trace):
    logits = trace.step_logits[0]  # (V,) real stored scores
    probs = final_probs(logits, GenerationOptions(temperature=1.0, top_k=20))
    n = 10_000
    freq = empirical(draw(probs, n, np.random.default_rng(123)), len(probs))
    top = np.argsort(-probs)[:5]
    sigma = np.sqrt(probs[top] * (1 - probs[top]) / n)
    assert np.all(np.abs(freq[top] - probs[top]) < 5 * sigma + 1e-9)
    assert freq[probs == 0].sum() == 0  # filtered-out tokens are never drawn
