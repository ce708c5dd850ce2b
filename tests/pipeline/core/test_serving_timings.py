"""Timings that load cannot invert: ranges that overlap claim no ratio, a result that contradicts the work is measured
again."""


from pipeline.core.timing import compare_runs


# ---- timings that cannot be inverted by load ------------------------------------------------------
def test_overlapping_ranges_claim_no_ratio():
    c = compare_runs([0.10, 0.30, 0.12], [0.20, 0.25, 0.22])
    assert not c.separated and "no clear difference" in c.verdict("hit", "cold")


def test_separated_ranges_give_the_median_ratio():
    c = compare_runs([0.10, 0.12, 0.11], [0.50, 0.55, 0.52])  # medians 0.11 and 0.52 -> 4.7x
    assert c.separated and c.a_median == 0.11 and c.b_median == 0.52
    assert "hit is 4.7× faster" in c.verdict("hit", "cold")


def _timer(values: list[float]):
    """A run that returns the next of `values` as the seconds it measured."""
    it = iter(values)
    return lambda: next(it)


def test_a_result_that_contradicts_the_work_is_measured_again():
    from pipeline.core.timing import interleave_less_work

    # the hit (less work) first measured clearly slower, then clearly faster on the second look
    c = interleave_less_work(_timer([0.9, 0.9, 0.9] + [0.1] * 6), _timer([0.2, 0.2, 0.2] + [0.5] * 6), 3)
    assert not c.noise and c.repeats == 6 and "hit is 5.0× faster" in c.verdict("hit", "cold")


def test_a_result_that_keeps_contradicting_the_work_is_noise():
    from pipeline.core.timing import interleave_less_work

    c = interleave_less_work(_timer([0.9] * 9), _timer([0.2] * 9), 3)
    assert c.noise and "noise" in c.verdict("hit", "cold") and "faster" not in c.verdict("hit", "cold")
