"""Prefill & decode as a walk through the app found it (fast tier, tiny model): the roofline's table of nine columns ran
past the page's right edge, and the batching chart's per-user line could fall from B = 1 to B = 4 under load with
no word that this is noise."""
import time

from kit.apptest import page_app
from kit.table_width import record_tables, too_wide

from pipeline.costs.ceilings import Ceilings, Measured
from pipeline.costs.sweep import Point, impossible_falls


def point(b: int, ms: float, lo: float, hi: float) -> Point:
    return Point(b, ms / 1e3, (lo / 1e3, hi / 1e3), 10, decode_cost_stub(b), None)


def decode_cost_stub(b: int):
    from types import SimpleNamespace

    return SimpleNamespace(flops=b, bytes=1)


def test_a_larger_batch_measured_faster_per_user_is_found_with_its_spread():
    pts = [point(1, 20, 18, 25), point(2, 21, 19, 24), point(4, 18, 16, 22), point(8, 30, 29, 31)]
    [fall] = impossible_falls(pts)
    assert (fall.before.batch_size, fall.after.batch_size) == (2, 4) and fall.within_spread
    [apart] = impossible_falls([point(1, 20, 19, 21), point(4, 15, 14, 16)])
    assert not apart.within_spread
    assert impossible_falls([point(1, 20, 18, 25), point(2, 20, 18, 25), point(4, 26, 25, 27)]) == []


def ceilings() -> Ceilings:
    return Ceilings("cpu (test)", "tiny", [Measured("matmul", 5e10, 4e10, 6e10)], Measured("copy", 1e10, 9e9, 1.1e10),
                    3, time.time())


def test_the_roofline_tables_fit_the_page_and_keep_the_verdict_in_sight(tiny_app, monkeypatch):
    import pipeline.costs.ceilings as ceiling_store

    monkeypatch.setattr(ceiling_store, "cached", lambda *_: ceilings())
    asked = record_tables(monkeypatch)
    at = page_app("prefill_decode", req_max_new_tokens=3).run()
    assert not at.exception, at.exception
    passes = [d for d, _ in asked if "pass" in d.columns]
    assert any("verdict (measured)" in d.columns for d in passes) and any("GB/s" in d.columns for d in passes)
    assert not too_wide([(d, kw) for d, kw in asked if "pass" in d.columns]), [list(d.columns) for d in passes]
    at.button(key="pd_prefill").click().run()  # prefill against prompt length, with the shares of each ceiling
    assert not at.exception, at.exception
    curve = [(d, kw) for d, kw in asked if "prompt tokens" in d.columns]
    assert any("verdict (measured)" in d.columns for d, _ in curve) and any("tokens/s" in d.columns for d, _ in curve)
    assert not too_wide(curve), [list(d.columns) for d, _ in curve]


def test_a_batching_sweep_that_falls_says_it_is_noise_and_how_far(tiny_app, monkeypatch):
    import pipeline.costs.sweep as sweep

    pts = [point(1, 20, 18, 25), point(2, 21, 19, 24), point(4, 18, 16, 22)]

    def measured(*_args, **_kw):  # a long job of no chunks: its result at once
        return pts
        yield

    monkeypatch.setattr(sweep, "sweep_steps", measured)
    at = page_app("prefill_decode", req_max_new_tokens=3, pd_sizes=[1, 2, 4]).run()
    at.button(key="pd_sweep").click().run()
    assert not at.exception, at.exception
    said = [i.value for i in at.info if "fell from" in i.value]
    assert len(said) == 1, [i.value for i in at.info]
    assert "from B = 2 to B = 4: 21 ms (range 19–24), then 18 ms (range 16–22)" in said[0]
    assert "noise" in said[0] and "ranges of repeats overlap" in said[0]
