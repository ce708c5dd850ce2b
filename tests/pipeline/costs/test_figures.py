"""One figure, one definition: the FLOPs of a pass from one function on every page, the roofline's
third regime (overhead-bound), every speed verdict kept with its date, and a time always named by its path."""
from types import SimpleNamespace

import pytest

from pipeline.core.errors import InputError
from pipeline.core.timing import compare_runs
from pipeline.costs.ceilings import Ceilings, Measured
from pipeline.costs.pass_costs import decode_cost, prefill_cost
from pipeline.model.dims import ModelDims

# small enough to count by hand: 2 layers, width 8, 2 query heads and 1 K/V head of width 4, MLP 16, 32 entries
SMALL = ModelDims(name="small", L=2, H=2, Hkv=1, Dh=4, D=8, D_mlp=16, V=32, context_window=64, rope_base=1e4,
                  dtype="float32", device="cpu", bytes_per_value=4)


def hand_flops(T: int, past: int) -> int:
    """2 FLOPs per multiply-add. Per layer: q, o (8 x 2*4) and k, v (8 x 1*4): 8 * (2+1+1+2) * 4 = 192 weights,
    the MLP 3 * 8 * 16 = 384; attention q.k and p.v: 2 products x T queries x (past + T) keys x 2 heads x 4.
    The embedding lookup is free; the LM head (8 x 32) runs for the last position only."""
    linear = 2 * T * (192 + 384)
    attention = 2 * 2 * T * (past + T) * 2 * 4
    return 2 * (linear + attention) + 2 * 8 * 32


def test_prompt_caching_and_prefill_decode_count_flops_with_the_same_function():
    from pipeline.costs.roofline import trace_points
    from pipeline.prompt_cache.playback import work_flops

    assert hand_flops(5, 0) == 2 * (5760 + 800) + 512 == 13_632
    # Prompt caching: a 5-token prompt, 3 reused from the cache: 2 computed after 3 held
    computed, cold = work_flops(SMALL, {"n_tokens": 5, "tokens_reused": 3})
    assert (computed, cold) == (hand_flops(2, 3), hand_flops(5, 0)) == (5_760, 13_632)
    assert work_flops(SMALL, {"n_tokens": 5, "tokens_reused": 0}) == (13_632, 13_632)
    # Prefill & decode: the run's prefill pass and its decode steps
    trace = SimpleNamespace(dims=SMALL, ids=list(range(5)), timings=SimpleNamespace(prefill_s=0.01),
                            steps=[SimpleNamespace(step=0, seconds=0.01, batch_size=1),
                                   SimpleNamespace(step=1, seconds=0.01, batch_size=1)])
    prefill, steps = trace_points(trace)
    assert prefill.cost.flops == cold == prefill_cost(SMALL, 5).flops
    assert steps[0].cost.flops == hand_flops(1, 5) == decode_cost(SMALL, 5).flops  # step 1 fed token 0 after 5


def roof(flops_per_s=1e11, bytes_per_s=1e10) -> Ceilings:
    return Ceilings("cpu (test)", "small", [Measured("matmul", flops_per_s, flops_per_s, flops_per_s)],
                    Measured("copy", bytes_per_s, bytes_per_s, bytes_per_s), 1)


def test_a_pass_far_under_both_ceilings_is_overhead_bound():
    from pipeline.costs.roofline import COMPUTE, MEMORY, OVERHEAD, place

    r = roof()
    step = decode_cost(SMALL, 5)
    at_memory = step.bytes / r.bytes_per_s  # the time the memory ceiling allows
    assert place(step, at_memory / 0.6).verdict(r) == MEMORY  # 60 % of the memory ceiling
    slow = place(step, at_memory / 0.08)  # 8 % of memory, less of compute: the captured run's decode here
    assert slow.memory_share(r) == pytest.approx(0.08) and slow.compute_share(r) < 0.08
    assert slow.verdict(r) == OVERHEAD
    assert slow.bound_s(r) == pytest.approx(at_memory)
    assert slow.overhead_s(r) == pytest.approx(at_memory / 0.08 - at_memory)  # what neither ceiling explains
    prefill = prefill_cost(SMALL, 34)
    at_ceiling = place(prefill, 1.0).bound_s(r)
    assert place(prefill, at_ceiling / 0.9).verdict(r) in (COMPUTE, MEMORY)
    assert place(prefill, at_ceiling / 0.08).verdict(r) == OVERHEAD  # a 34-token prefill at 8 % of its ceiling
    assert place(step, at_memory).overhead_s(r) == 0.0


def test_an_overhead_bound_pass_says_what_the_overhead_is_here():
    from pipeline.costs.pass_costs import pass_cost
    from pipeline.costs.regimes import above_a_ceiling, operations_sentence, regime_sentence
    from pipeline.costs.roofline import place

    r = roof()
    step = decode_cost(SMALL, 5)
    at_memory = step.bytes / r.bytes_per_s
    slow = place(step, 0.175, "decode step 3, captured run")
    idle = pass_cost(SMALL, 1, 0)
    busy_probe = place(idle, 0.120, "1-token pass, nothing cached")  # far over its ceilings: the fixed cost
    said = regime_sentence(slow, r, busy_probe)
    assert "overhead-bound" in said and "takes 120 ms" in said and "the framework's many small operations" in said
    quick_probe = place(idle, idle.bytes / r.bytes_per_s * 1.1, "1-token pass, nothing cached")  # near its ceiling
    said = regime_sentence(slow, r, quick_probe, "recording every layer's tensors")
    assert "this path's own (recording every layer's tensors)" in said
    # a probe a third of the way to its memory ceiling (as Gemma's on this CPU): two thirds of it is still overhead,
    # and the sentence says so, with what this pass pays beyond it (before: "close to what its ceilings allow")
    idle_memory = place(idle, 1.0).bound_s(r)
    third_probe = place(idle, idle_memory * 3, "1-token pass, nothing cached")
    said = regime_sentence(place(step, 20 * idle_memory, "decode step 4, captured run"), r, third_probe, "hooks")
    assert f"{third_probe.overhead_s(r) * 1e3:,.1f} ms of it beyond its ceilings" in said
    assert "more than that: this path's own (hooks)" in said and "close to" not in said
    quarter_probe = place(idle, idle_memory * 4, "1-token pass, nothing cached")
    said = regime_sentence(place(step, 4.5 * idle_memory, "decode step, plain path"), r, quarter_probe)
    assert "overhead-bound" in said and "more than that" not in said  # about the probe's overhead: none of its own
    # the probe's operations: its time beyond its bytes and FLOPs shared out over them (by hand: ~120 ms / 1,200)
    said = operations_sentence(busy_probe, 1_200, 30, r)
    assert said.startswith("The pass at almost no work (1-token pass, nothing cached) runs 1,200 separate "
                           "operations (40 a layer × 30 layers).")
    overhead = busy_probe.overhead_s(r)
    assert f"{overhead * 1e3:,.0f} ms is neither memory nor arithmetic: about {overhead / 1_200 * 1e6:,.0f} µs" in said
    assert "µs" not in operations_sentence(busy_probe, 1_200, 30, None)  # no ceilings: no share of the overhead
    at_its_bound = place(idle, place(idle, 1.0).bound_s(r) * 0.9, "1-token pass, nothing cached")
    assert "µs" not in operations_sentence(at_its_bound, 1_200, 30, r)  # nothing beyond its ceilings to share out
    assert regime_sentence(place(step, at_memory / 0.6, "decode step, plain path"), r).startswith(
        "decode step, plain path: 60% of the memory ceiling")
    assert above_a_ceiling([slow, place(step, at_memory / 1.6, "too fast")], r)[0].label == "too fast"


def test_a_later_speed_verdict_is_kept_beside_the_earlier_one():
    from pipeline.costs.verdicts import add, summary

    first = compare_runs([0.010, 0.011, 0.012], [0.040, 0.044, 0.048])  # A 4.0x faster
    later = compare_runs([0.020, 0.021, 0.022], [0.038, 0.040, 0.042])  # A 1.9x faster
    history = add(add((), first, at=1_000.0), later, at=1_600.0)
    assert [d.comparison for d in history] == [first, later]  # both kept, oldest first
    assert add(history, later, at=1_600.0) == history  # the same measurement shown again is not counted twice
    said = summary(history, "SmolLM2", "Gemma")
    assert "SmolLM2 was faster in each of 2 measurements" in said and "1.9× to 4.0×" in said
    reversed_ = compare_runs([0.050, 0.051, 0.052], [0.030, 0.031, 0.032])
    assert "disagree" in summary(add(history, reversed_, at=2_000.0), "SmolLM2", "Gemma")
    unclear = compare_runs([0.030, 0.040], [0.035, 0.045])
    assert "not settled: SmolLM2 was clearly faster in 2 of 3" in summary(add(history, unclear, at=3_000.0),
                                                                          "SmolLM2", "Gemma")
    assert "measured once" in summary(history[:1], "SmolLM2", "Gemma")
    assert "4.0× faster" in summary(history[:1], "SmolLM2", "Gemma")


def test_a_time_says_its_path():
    from pipeline.costs.named_time import BATCHED, CAPTURED, PLAIN, NamedTime, time_label, tpot, ttft

    trace = SimpleNamespace(timings=SimpleNamespace(tpot_s=0.175, ttft_s=0.9, prefill_s=0.8, prefill_path=CAPTURED,
                                                    decode_path=CAPTURED, device=None))
    t = tpot(trace)
    assert (t.quantity, t.path, t.seconds) == ("TPOT", CAPTURED, 0.175)
    assert t.label == "TPOT (captured run)" and "recording hooks" in t.name and t.shown == "175 ms"
    assert time_label("TPOT", PLAIN) == "TPOT (plain path)" != t.label
    served = SimpleNamespace(timings=SimpleNamespace(tpot_s=0.084, ttft_s=11.1, prefill_path=CAPTURED,
                                                     decode_path=BATCHED, device="cpu"))
    assert (ttft(served).label, tpot(served).label) == ("TTFT (captured run)", "TPOT (batched)")
    assert tpot(SimpleNamespace(timings=SimpleNamespace(tpot_s=None, decode_path=CAPTURED, device=None))) is None
    with pytest.raises(InputError):
        NamedTime("TPOT", "guessed", 0.1)
