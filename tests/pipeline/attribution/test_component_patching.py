"""Patching in seconds (pipeline/attribution/component_patching.py): attribution patching's estimates against real
activation patching, on tiny random-weight Llama and Gemma 3 models (fast tier) and the real SmolLM2 and Gemma 3
(`model`).

References from outside the code under test: a central finite difference of the real patched run (the estimate is
the derivative of patching along clean - corrupted, so the two must agree), the plain corrupted run (patching a
part whose two runs are equal changes nothing), pandas' own Spearman correlation.
"""
import numpy as np
import pandas as pd
import pytest
from kit.texts import CLEAN, CORRUPTED
from kit.tolerance import assert_within, logits_tolerance

from pipeline.attribution import component_patching as cp
from pipeline.core.errors import InputError


@pytest.fixture(scope="module", params=["llama", "gemma"])
def tiny(request, tiny_models):
    """The tiny Llama, then the tiny Gemma 3 (kit.model_fixtures.tiny_models)."""
    return tiny_models[request.param]


def pandas_spearman(x, y) -> float:
    """pandas' DataFrame.corr (its own rank code: Series.corr would need scipy)."""
    return float(pd.DataFrame({"x": x, "y": y}).corr(method="spearman").iloc[0, 1])


def pair(tokenizer):
    return tokenizer(CLEAN)["input_ids"], tokenizer(CORRUPTED)["input_ids"]


def test_each_estimate_is_the_derivative_of_real_patching(tiny, tokenizer):
    """The estimate of a part is d/de of the real metric with the part set to corrupted + e (clean - corrupted), at
    e = 0: a central difference of two real patched runs (e = +-1e-2) gives it within 2 %."""
    ids, bad = pair(tokenizer)
    p = cp.estimate_and_check(tiny, ids, bad, top=0)
    _, clean_acts = cp._clean_run(tiny, ids)
    _, bad_acts = cp._clean_run(tiny, bad)
    a, b = p.clean_id, p.corrupted_id
    span = p.clean_diff - p.corrupted_diff
    tol = logits_tolerance(tiny, bad, [a, b]).sum()
    L, H = tiny.dims.L, tiny.dims.H
    for layer, head in [(0, 0), (L - 1, H - 1), (1, None), (L - 1, None)]:
        eps = 1e-2
        up, down = ({k: bad_acts[k] + e * (clean_acts[k] - bad_acts[k]) for k in bad_acts} for e in (eps, -eps))
        out = np.stack([cp._patched_logits(tiny, bad, acts, [(layer, head)])[0] for acts in (up, down)])
        derivative = float((out[0, a] - out[0, b]) - (out[1, a] - out[1, b])) / (2 * eps) / span
        estimate = p.mlp[layer] if head is None else p.heads[layer, head]
        # 2 %: the central difference's own error (the third derivative's term); abs: two patched passes' float32
        # rounding of the logits' difference, divided like the derivative
        rounding = 2 * tol / (2 * eps * abs(span))
        assert estimate == pytest.approx(derivative, rel=2e-2, abs=rounding), (layer, head)


def test_estimates_rank_the_parts_as_real_patching_does_on_tiny_models(tiny, tokenizer):
    """Every part (L x (H + 1) = 15) patched for real: the estimates' ranks agree (measured: Spearman 1.00 on the
    tiny Llama, 0.93 on the tiny Gemma, whose four norms per block bend more); the statistic is pandas' own."""
    ids, bad = pair(tokenizer)
    n = tiny.dims.L * (tiny.dims.H + 1)
    p = cp.estimate_and_check(tiny, ids, bad, top=n)
    assert len(p.checked) == n
    est, real = [c.estimate for c in p.checked], [c.real for c in p.checked]
    rho, overlap = p.agreement(top=5)
    assert rho == pytest.approx(pandas_spearman(est, real), abs=1e-12)
    assert rho >= 0.85 and overlap >= 4, (rho, overlap)
    assert [abs(e) for e in est] == sorted((abs(e) for e in est), reverse=True)  # the largest estimates first
    heads = {(c.layer, c.head): c.estimate for c in p.checked}
    assert heads[(0, 1)] == pytest.approx(p.heads[0, 1]) and heads[(1, None)] == pytest.approx(p.mlp[1])


def test_patching_a_question_into_itself_restores_nothing_and_bad_input_is_named(tiny, tokenizer):
    ids, bad = pair(tokenizer)
    with pytest.raises(InputError, match="corrupted"):
        cp.estimate_steps(tiny, ids, bad[:-1])
    with pytest.raises(InputError, match="top"):
        cp.estimate_steps(tiny, ids, bad, top=cp.MAX_CHECKED + 1)
    same = cp.estimate_and_check(tiny, ids, ids, top=3)
    # the estimates multiply clean - corrupted activations, the same computation on the same ids: exactly 0
    assert np.abs(same.heads).max() == 0 and np.abs(same.mlp).max() == 0
    # a real patch swaps in the same values, but its pass runs a batch of rows, the plain run one: the logits'
    # difference moves by float32 rounding only (real = (patched - corrupted difference) / span, span clamped to
    # 1e-9 when the two runs' differences are as close as that)
    d = same.clean_diff - same.corrupted_diff
    span = d if abs(d) > 1e-9 else 1e-9
    tol = logits_tolerance(tiny, ids, [same.clean_id, same.corrupted_id]).sum()  # a difference of two logits
    for c in same.checked:
        assert_within(c.real * span, 0.0, tol, f"patched into itself: {c.layer, c.head}")


def test_spearman_by_hand():
    assert cp.spearman(np.array([1.0, 2.0, 3.0]), np.array([10.0, 30.0, 20.0])) == pytest.approx(0.5)
    assert cp.spearman(np.array([1.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0])) == pytest.approx(
        pandas_spearman([1.0, 1.0, 2.0], [1.0, 2.0, 3.0]))


@pytest.mark.model
@pytest.mark.parametrize("which", ["lm", "gemma_lm"])
def test_real_models_estimates_agree_with_real_patching_on_the_top_parts(which, request):
    """The default question against "Are carrots fruit?": the 20 parts with the largest estimates patched for real.
    Measured (2026-12-04, CPU): Spearman 0.68 on SmolLM2 (4 of the top 5 shared) and 0.93 on Gemma 3 (3 of 5).
    SmolLM2's outlier is layer 0's MLP: estimated -8 %, real +100 % (it rewrites "carrots" into "tomatoes" as a
    whole, far from linear); hence >= 0.5 and >= 3 of 5, with the measured values above them."""
    from pipeline.stages.request import ChatRequest
    from pipeline.stages.tokens import tokenize_request

    lm = request.getfixturevalue(which)
    fmt = "plain" if which == "gemma_lm" else "chat"
    ids, bad = (tokenize_request(lm.tokenizer, ChatRequest.from_question(q, prompt_format=fmt)).ids
                for q in ("Are tomatoes fruit?", "Are carrots fruit?"))
    p = cp.estimate_and_check(lm, ids, bad, top=20)
    rho, overlap = p.agreement(top=5)
    assert rho >= 0.5 and overlap >= 3, (rho, overlap)
