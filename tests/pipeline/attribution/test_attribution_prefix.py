"""Patched runs after a shared prefix (pipeline/attribution/prefix.py), on the tiny Llama and Gemma 3 (fast tier):
the same numbers as running every position, and an honest time left.

References from outside the code under test: the same jobs with the prefix switched off (every pass from position
0, every position patched: the computation before), and parts timed on a fake clock whose costs follow a model
with a fixed cost per pass that the work units do not count (as on a loaded CPU), against the time the rest of
the job then really takes.
"""
import numpy as np
import pytest
from kit.texts import CLEAN, CORRUPTED
from kit.tolerance import logits_tolerance

from pipeline.attribution import component_patching as cp
from pipeline.attribution import interventions as iv
from pipeline.attribution import prefix as px
from pipeline.core.common_prefix import common_prefix_len
from pipeline.core.long_jobs import Progress, run_to_end
from pipeline.server.run_queue import RunQueue


@pytest.fixture(scope="module", params=["llama", "gemma"])
def tiny(request, tiny_models):
    return tiny_models[request.param]


def pair(tokenizer, where: str):
    """The patching pair with a shared opening ("mid": the change after 4 tokens, "start": the kit's own pair)."""
    clean, bad = CLEAN, CORRUPTED
    if where == "mid":
        clean, bad = "Please tell me: " + clean, "Please tell me: " + bad
    return tokenizer(clean)["input_ids"], tokenizer(bad)["input_ids"]


@pytest.mark.parametrize("where", ["start", "mid"])
def test_patching_after_the_shared_prefix_gives_the_numbers_of_the_whole_run(tiny, tokenizer, where, monkeypatch):
    ids, bad = pair(tokenizer, where)
    assert len(ids) == len(bad) and (where == "start" or common_prefix_len(ids, bad) >= 4)
    shared = cp.estimate_and_check(tiny, ids, bad, top=6)
    positions = list(range(len(ids)))
    mapped = iv.patch_residual(tiny, ids, bad, positions)
    with monkeypatch.context() as m:  # every pass from position 0, every position patched: as before the prefix
        m.setattr(px, "start_of", lambda *a, **k: 0)
        m.setattr(iv, "common_prefix_len", lambda *a, **k: 0)
        whole = cp.estimate_and_check(tiny, ids, bad, top=6)
        whole_map = iv.patch_residual(tiny, ids, bad, positions)
    tol = float(logits_tolerance(tiny, bad, [shared.clean_id, shared.corrupted_id]).sum())  # a difference of two
    span = abs(whole.clean_diff - whole.corrupted_diff)
    assert (shared.clean_id, shared.corrupted_id) == (whole.clean_id, whole.corrupted_id)
    assert shared.corrupted_diff == pytest.approx(whole.corrupted_diff, abs=2 * tol)
    # the estimates: the same products, fewer of them (the positions before the change add exactly 0)
    np.testing.assert_allclose(shared.heads, whole.heads, atol=4 * tol / span)
    np.testing.assert_allclose(shared.mlp, whole.mlp, atol=4 * tol / span)
    assert [(c.layer, c.head) for c in shared.checked] == [(c.layer, c.head) for c in whole.checked]
    np.testing.assert_allclose([c.real for c in shared.checked], [c.real for c in whole.checked],
                               atol=4 * tol / span)
    np.testing.assert_allclose(mapped.restored, whole_map.restored, atol=4 * tol / abs(mapped.clean_diff -
                                                                                         mapped.corrupted_diff))
    d = common_prefix_len(ids, bad)
    assert (mapped.restored[:, :d] == 0).all()  # no pass: the two streams are the same there


def test_a_pass_rows_copies_stay_within_the_bound_and_the_plan_counts_only_what_runs(tiny, tokenizer):
    ids, bad = pair(tokenizer, "mid")
    d = common_prefix_len(ids, bad)
    assert common_prefix_len([1, 2, 3], [1, 5, 3]) == 1 and common_prefix_len([1, 2], [1, 2]) == 2
    assert px.start_of(len(ids), len(ids)) == len(ids) - 1  # the same question: only the last position runs
    m = tiny.dims
    row = 1000 * 2 * m.Hkv * m.Dh * m.bytes_per_value
    assert px.rows_per_pass(tiny, 990, 12, 10) == max(1, min(12, px.KV_COPY_BYTES // row))
    plan = cp.patching_plan(tiny, ids, bad, 6)
    rows = px.rows_per_pass(tiny, d, 12, len(ids) - d)
    assert [k for k, _ in plan] == ["plain", "backward"] + ["patched"] * -(-6 // rows)
    assert plan[2:] == [("patched", px.pass_work(tiny, min(rows, 6 - k), len(ids) - d, d)) for k in range(0, 6, rows)]
    steps = cp.estimate_steps(tiny, ids, bad, 6)
    seen = []
    while True:
        try:
            seen.append(next(steps))
        except StopIteration:
            break
    assert [p.work for p in seen] == [(sum(w for _, w in plan[:k + 1]), sum(w for _, w in plan))
                                      for k in range(len(plan))]
    assert seen[-1].left_s == 0 and seen[-1].fraction == 1


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_job(clock: Clock, plan, cost):
    """A job of `plan`'s parts, each moving the fake clock by cost(kind, units)."""
    for k, (kind, units) in enumerate(plan):
        clock.now += cost(kind, units)
        yield Progress(k + 1, len(plan), f"part {k + 1}")
    return "done"


def the_long_prompt_plan():
    """The page's Patch on a ~610-token question changed in its middle (SmolLM2's sizes): a 610-token plain run,
    a 300-token forward and backward, then four patched passes of 12 rows x 300 positions."""
    span = 3100.0
    work = lambda rows, new, cached: rows * new * (1 + (cached + new / 2) / span)  # noqa: E731  as px.pass_work
    return ([("plain", work(1, 310, 0) + work(1, 300, 310)), ("backward", 3 * work(1, 300, 310))]
            + [("patched", work(12, 300, 310))] * 4)


@pytest.mark.parametrize("overhead", [0.0, 5.0])
def test_the_time_left_said_after_each_part_is_within_a_factor_of_what_the_rest_takes(overhead, monkeypatch):
    """Each kind's seconds per unit differ (a backward unit 1.3x a plain one, a patched one 0.8x) and each pass pays
    `overhead` seconds the units do not count (a loaded CPU: ~5 s a pass measured here). The time left said after
    each part (the queue's estimate_s, from the job's own forecast) is within 2x of the time the rest of the job
    really takes from there, and exact once every kind has run (the parts of a kind cost alike). Counting parts, as
    the queue did before, said less than half after the two plain parts (on the page's full map, whose patched
    passes ran 12 rows of the whole prompt, 16 times too little: the jump the issue saw)."""
    clock = Clock()
    monkeypatch.setattr(px.time, "perf_counter", clock)
    monkeypatch.setattr(px, "_rates", {})  # no earlier job's rates: the first job's forecast
    plan = the_long_prompt_plan()
    per_unit = {"plain": 0.01, "backward": 0.013, "patched": 0.008}
    cost = lambda kind, units: overhead + per_unit[kind] * units  # noqa: E731
    q = RunQueue(clock=clock)
    said, holder = [], {}

    def watched():
        steps = px.measured(FakeLM, plan, fake_job(clock, plan, cost))
        while True:
            try:
                p = next(steps)
            except StopIteration as end:
                return end.value
            yield p
            said.append((clock.now, holder["ticket"].estimate_s()))

    holder["ticket"] = q.submit_long("job", watched, asker="a")
    assert holder["ticket"].result(10) == "done"
    end = clock.now
    for k, (at, estimate) in enumerate(said[:-1]):
        really = end - at
        assert really / 2 <= estimate <= 2 * really, (k, estimate, really)
        if k >= 2:  # every kind has run
            assert estimate == pytest.approx(really, rel=1e-9), (k, estimate, really)
    times = [cost(k, w) for k, w in plan]
    by_parts = sum(times[:2]) / 2 * (len(plan) - 2)  # the old estimate after the two plain parts
    assert (end - said[1][0]) / by_parts > 2


class FakeLM:
    class dims:
        name = "fake-model"


def test_the_expected_time_before_a_start_reads_the_latest_jobs_rates(tiny, tokenizer):
    ids, bad = pair(tokenizer, "mid")
    px._rates.pop((tiny.dims.name, "plain"), None)
    plan = cp.patching_plan(tiny, ids, bad, 6)
    if not px.measured_here(tiny):
        assert px.expected_s(tiny, plan) is None
        assert px.expected_s(tiny, plan, fallback=0.5) == pytest.approx(0.5 * sum(w for _, w in plan))
    run_to_end(cp.estimate_steps(tiny, ids, bad, 6))
    assert px.measured_here(tiny)
    rates = {k: px._rates[tiny.dims.name, k] for k in ("plain", "backward", "patched")}
    assert px.expected_s(tiny, plan, fallback=1e9) == pytest.approx(sum(w * rates[k] for k, w in plan))


def test_a_kind_not_run_yet_is_forecast_from_the_latest_jobs_relative_costs():
    """The latest job ran 3x slower throughout (another load): its kinds' relative costs still tell this job's
    patched passes, so the time left after the first part is exact (without them: the plain part's rate, 20 % off)."""
    plan = the_long_prompt_plan()
    per_unit = {"plain": 0.01, "backward": 0.013, "patched": 0.008}
    times = [per_unit[k] * w for k, w in plan]
    slower = {k: 3 * r for k, r in per_unit.items()}
    assert px.forecast(plan, times[:1], slower) == pytest.approx(sum(times[1:]), rel=1e-9)
    assert px.forecast(plan, times[:1]) == pytest.approx(sum(w for _, w in plan[1:]) * 0.01, rel=1e-9)
    assert px.forecast(plan, times[:3], {"plain": 1.0}) == pytest.approx(sum(times[3:]), rel=1e-9)
