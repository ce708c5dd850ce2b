"""Analysis invariants on the real SmolLM2 capture: RoPE, logit lens, residual stream, embeddings,
sampling. Nothing is hard-coded: every expected value comes from the model or from maths."""
import numpy as np
import pytest
import torch
from kit.tolerance import (U32, abs_dot, additions_tolerance, assert_same_best, assert_within, attention_tolerance,
                           float32_tolerance, float64_tolerance, forward_tolerance, lens_tolerance, scale)

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
        normed = block.input_layernorm(x)
        q = block.self_attn.q_proj(normed).cpu().numpy()  # (T, H*Dh)
    H, Dh, D = trace.dims.H, trace.dims.Dh, trace.dims.D
    T = x.shape[0]
    # the projection recomputed (the norm's mean over D, then D terms), rotated by two terms each; the model's own
    # angles p * f are float32 (off by up to u p, turning a vector of size |q| by that much); ours float64
    projection = float32_tolerance(D, abs_dot(normed.cpu().numpy(), block.self_attn.q_proj.weight).max(), depth=2)
    tol = 2 * projection + float32_tolerance(2, 2 * scale(q)) + 2 * U32 * T * np.linalg.norm(q.reshape(T, H, Dh),
                                                                                            axis=-1).max()
    q = q.reshape(T, H, Dh).transpose(1, 0, 2)  # (H, T, Dh)
    ours = rope.rotate(q, np.arange(T), trace.dims.rope_base)
    assert_within(ours, trace.prefill.q_rot[layer], tol, "rotated")
    assert_within(rope.unrotate(trace.prefill.q_rot[layer], np.arange(T), trace.dims.rope_base), q, tol, "turned back")


def test_rope_score_depends_only_on_distance(trace):
    base = trace.dims.rope_base
    q, k = rope.pre_rope(trace.prefill, layer=10, q_head=4, kv_head=1, base=base)  # (T, Dh) each
    i, j = len(trace.tokens) - 1, 5
    scores = rope.shifted_scores(q[i], k[j], i, j, [0, 1, 7, 100, 3000], base)
    Dh = q.shape[-1]
    terms = np.linalg.norm(q[i]) * np.linalg.norm(k[j]) / np.sqrt(Dh)  # bounds |q| . |k| / sqrt(Dh)
    # float64 rotations (the angle of position 3,000 known to 3,000 u64) and a dot product of Dh terms
    assert_within(scores, scores[0], float64_tolerance(Dh, terms, depth=2) * 3000, "shifted scores")
    # shift 0 is the model's own (pre-softmax) score: ours float64, this one a float32 dot product of Dh terms
    own = trace.prefill.q_rot[10, 4, i] @ trace.prefill.k_rot[10, 1, j] / np.sqrt(Dh)
    assert_within(scores[0], own, float32_tolerance(Dh, terms), "the model's own score")
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
    top_ids, top_logits, top_probs = top_per_position(lm, trace.prefill.final_norm)  # the head over the captured norm
    # the lens recomputes the final norm (a mean over D) in rows of 7, then the head (D terms) and the softmax (V
    # terms); a probability p moves by p (d_t + max d) for logit errors d (at most d_logit each)
    d_logit = lens_tolerance(lm, trace.prefill.final_norm)
    rtol = 2 * d_logit + float32_tolerance(trace.dims.V, 1.0, depth=2)
    assert_within(probs[-1, :, 0], top_probs[:, 0], rtol * top_probs[:, 0], "the lens's last layer")
    assert_same_best(ids[-1, :, 0], top_ids[:, 0], top_logits[:, :2], d_logit, "the lens's last layer")
    assert ids[-1, -1, 0] == trace.generated_token_ids[0]  # greedy run: the first answer token


def test_layer_statistics_equal_an_independent_computation(trace):
    p = trace.prefill
    L, T = trace.dims.L, len(trace.tokens)
    h = torch.from_numpy(p.hidden_states).double()  # (L+1, T, D)
    norms = la.norms(p.hidden_states)
    assert norms.shape == (L + 1, T)
    ref = torch.linalg.vector_norm(h, dim=-1).numpy()  # float64; ours a float32 sum of D squares at worst
    D = trace.dims.D
    assert_within(norms, ref, float32_tolerance(D, 1.0) * ref, "norms")
    cos = la.consecutive_cosine(p.hidden_states)
    ref = torch.nn.functional.cosine_similarity(h[:-1], h[1:], dim=-1).numpy()  # (L, T)
    assert cos.shape == (L, T)
    assert_within(cos, ref, float32_tolerance(D, 1.0, depth=3), "cosines")  # three sums of D terms, |cos| <= 1


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
        before, after = hidden[i][0].double(), hidden[i + 1][0].double()
        # the block's two float32 additions, each rounded to nearest: half an ulp of h + attn and of the result
        tol = additions_tolerance(hidden[i][0].float() + attn[i].float(), hidden[i + 1][0])
        assert_within(after - before, attn[i] + mlp[i], tol, f"block {i}")
    c = la.contributions(trace.prefill.attn_out, trace.prefill.mlp_out)
    T, D = len(trace.ids), trace.dims.D
    for part, writes in (("attention", attn), ("mlp", mlp)):
        norms = torch.linalg.vector_norm(writes, dim=-1).cpu().numpy()  # (L, T)
        # the trace's pass and this one: each value within forward rounding, a norm of D of them within sqrt(D) x
        tol = np.sqrt(D) * forward_tolerance(trace.dims, scale(writes), T) + float32_tolerance(D, 1.0) * norms
        assert_within(c[part], norms, tol, part)


def test_attention_by_hand_matches_the_model_on_the_full_row(trace):
    p, layer, head = trace.prefill, 3, 5
    T = len(trace.tokens)
    every = attention_by_hand(p.q_rot[layer], p.k_rot[layer], p.v[layer], head, range(T))
    q, k = p.q_rot[layer, head], p.k_rot[layer, head // 3]
    tol = attention_tolerance(q, k, q.shape[-1] ** -0.5, T)  # float64 by hand, the model's float32
    assert_within(every["weights"], attention_for_layer(p, layer)[head], tol, "weights")
    rows = [2, 9, 20, T - 1]
    four = attention_by_hand(p.q_rot[layer], p.k_rot[layer], p.v[layer], head, rows)
    assert four["kv_head"] == head // 3
    assert np.all(np.isneginf(four["masked"][np.triu_indices(4, 1)]))
    assert_within(four["weights"].sum(-1), 1.0, float64_tolerance(4, 1.0, depth=2), "four weights' sums")
    v = p.v[layer, head // 3, rows]
    assert_within(four["mixed"], four["weights"] @ v, float64_tolerance(4, abs_dot(four["weights"], v.T).max()),
                  "mixed")  # float64 both


def test_neighbours_are_real_tokens_and_the_word_is_its_own_nearest(lm, table):
    unit = es.unit_rows(table)
    for word in ("tomato", "king", "red"):
        wv, top = es.neighbours(unit, lm.tokenizer, table, word, k=5)
        assert not wv.split, f"{word} should be one token with a leading space"
        cosine_tol = float32_tolerance(table.shape[1], 1.0, depth=3)  # three sums of D terms (two norms, a dot)
        assert top[0]["id"] == wv.ids[0] and abs(top[0]["cosine"] - 1) <= cosine_tol
        for row in top:
            assert 0 <= row["id"] < len(table)
            assert row["text"] == token_text(lm.tokenizer, row["id"])
            v, w = table[row["id"]].astype(np.float64), wv.vector.astype(np.float64)
            assert abs(row["cosine"] - v @ w / (np.linalg.norm(v) * np.linalg.norm(w))) <= cosine_tol
        assert [r["cosine"] for r in top] == sorted((r["cosine"] for r in top), reverse=True)


def test_multi_token_word_uses_the_mean(lm, table):
    wv = es.word_vector(lm.tokenizer, table, "Solanaceae")
    assert wv.split
    rows = table[wv.ids].astype(np.float64)
    assert_within(wv.vector, rows.mean(axis=0), float32_tolerance(len(rows), np.abs(rows).mean(axis=0)), "mean")


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
