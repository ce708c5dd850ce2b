"""pipeline.faster.formats: the advice on `--weights bf16` follows this machine's measurement, whichever way it went."""
from pipeline.core.timing import compare_runs
from pipeline.faster.formats import FormatsReport, bf16_advice


def report(bf16_s: list[float], fp32_s: list[float]) -> FormatsReport:
    return FormatsReport(rows={}, tpot={}, steps=16, vs_fp32={"bf16": compare_runs(bf16_s, fp32_s)})


def test_bf16_is_advised_only_where_it_measured_faster():
    faster = bf16_advice(report([0.020, 0.021, 0.022], [0.040, 0.041, 0.043]))
    assert "2.0× faster" in faster and "--weights bf16" in faster and "less CPU" in faster
    assert "21.0 ms against 41.0 ms" in faster
    slower = bf16_advice(report([0.058, 0.060, 0.061], [0.042, 0.043, 0.044]))
    assert "1.4× slower" in slower and "on fp32" in slower
    overlap = bf16_advice(report([0.030, 0.045], [0.040, 0.050]))
    assert "within each other's range" in overlap and "no saving measured" in overlap


def test_no_bf16_measured_gives_no_advice():
    assert bf16_advice(FormatsReport(rows={}, tpot={}, steps=16, vs_fp32={})) == ""
