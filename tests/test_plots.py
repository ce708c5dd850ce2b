"""ui/plots.py's axis helpers."""
from ui.plots import log_axis


def test_a_log_axis_is_ticked_with_plain_numbers_that_span_the_values():
    axis = log_axis([0.45, 3.2, 13.6], "FLOPs per byte")
    assert axis["type"] == "log" and axis["tickvals"] == [0.2, 0.5, 1, 2, 5, 10, 20]
    assert axis["ticktext"] == ["0.2", "0.5", "1", "2", "5", "10", "20"]  # not plotly's "10, 2, 3" minor labels
    wide = log_axis([4.6, 48.0, 2_000.0], "GFLOP/s")
    assert wide["tickvals"][0] <= 4.6 and wide["tickvals"][-1] >= 2_000 and "1,000" in wide["ticktext"]
    assert log_axis([0, -1], "none") == {"type": "log", "title": "none"}  # nothing positive to span: plotly's own
