"""tests/kit/tolerance.py, the bound every numeric test takes its tolerance from: it holds for the sums torch and
numpy compute (any order they pick, under the CPU capability this run has), it is not so loose that a real error
passes, and its assertions say where they failed."""
import numpy as np
import pytest
import torch
from kit.tolerance import U32, agreed_steps, assert_within, float32_tolerance, float64_tolerance

SIZES = [64, 576, 1536, 2048, 49_152, 262_144]  # a head, SmolLM2's width and MLP, Gemma's MLP, both vocabularies


def terms(kind: str, n: int, rng) -> np.ndarray:
    """float32 terms of the kinds the models sum: positive (norms' squares), equal, a softmax's, signed."""
    if kind == "positive":
        return rng.random(n).astype(np.float32)
    if kind == "equal":
        return np.full(n, 0.1, dtype=np.float32)
    if kind == "softmax":
        logits = rng.normal(size=n) * 3
        return np.exp(logits - logits.max()).astype(np.float32)
    return rng.normal(size=n).astype(np.float32)


@pytest.mark.parametrize("n", SIZES)
def test_torch_and_numpy_sums_stay_within_the_bound(n):
    """Each sum against its exact value (float64 of the same float32 terms): one computation's roundings, so within
    the bound for two; and a dot product of two float32 vectors likewise on |x| . |w|."""
    rng = np.random.default_rng(n)
    for kind in ("positive", "equal", "softmax", "signed"):
        x = terms(kind, n, rng)
        exact = float(np.sum(x.astype(np.float64)))
        bound = float32_tolerance(n, float(np.abs(x.astype(np.float64)).sum()))
        for name, got in (("torch.sum", float(torch.from_numpy(x).sum())), ("numpy sum", float(np.sum(x))),
                          ("blocks of 64", float(np.sum(x.reshape(-1, 64).sum(1, dtype=np.float32))))):
            assert abs(got - exact) <= bound, (kind, name, got - exact, bound)
        w = rng.normal(size=n).astype(np.float32)
        exact = float(x.astype(np.float64) @ w.astype(np.float64))
        bound = float32_tolerance(n, float(np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64))))
        got = float(torch.from_numpy(x[None]) @ torch.from_numpy(w[:, None]))
        assert abs(got - exact) <= bound, (kind, "dot", got - exact, bound)


def test_the_bound_is_not_the_worst_case_and_still_catches_a_wrong_term():
    """sqrt(n) times tighter than n u M, so a wrong term of one part in a thousand of the sum is caught at every
    size the models have, while the float32 sums themselves pass (above)."""
    for n in SIZES[1:]:
        magnitude = float(n)  # n terms of size 1
        assert float32_tolerance(n, magnitude) < n * U32 * magnitude  # tighter than the worst case past n = 128
        assert float32_tolerance(n, magnitude) < 1e-3 * magnitude
    assert float32_tolerance(576, 8.0, depth=4) == pytest.approx(2 * float32_tolerance(576, 8.0))  # sqrt(depth)
    assert float64_tolerance(576, 8.0) == pytest.approx(float32_tolerance(576, 8.0) * 2.0 ** -29)
    assert np.allclose(float32_tolerance(4, np.array([1.0, 2.0])), [1, 2] * np.array(float32_tolerance(4, 1.0)))
    with pytest.raises(ValueError):
        float32_tolerance(0, 1.0)


def test_assert_within_names_the_worst_value_and_counts_nan_as_outside():
    assert_within(np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-9]), 1e-8, "close")
    with pytest.raises(AssertionError, match=r"1 of 2 values .* worst at \(1,\): 2\.5 against 2\.0"):
        assert_within(np.array([1.0, 2.5]), np.array([1.0, 2.0]), np.array([1.0, 0.1]), "far")
    with pytest.raises(AssertionError, match="1 of 1"):
        assert_within(np.array([np.nan]), np.array([0.0]), 1.0, "nan")
    with pytest.raises(AssertionError, match="shapes"):
        assert_within(np.zeros(2), np.zeros(3), 1.0, "shapes")


def test_answers_may_part_only_at_a_tie():
    scores = np.array([[0.0, 5.0, 1.0], [0.0, 2.0, 2.0 + 1e-6], [3.0, 0.0, 0.0]])  # step 1: a near-tie
    assert agreed_steps([1, 2, 0], [1, 2, 0], scores, 1e-5) == 3
    assert agreed_steps([1, 1, 1], [1, 2, 0], scores, 1e-5) == 1  # parted at the tie: fine, 1 step shared
    with pytest.raises(AssertionError, match="step 0"):
        agreed_steps([2, 2, 0], [1, 2, 0], scores, 1e-5)  # parted where the best led by 4
