"""ui/plots.py's axis helpers and ui/words.py's shortening."""
from ui.plots import log_axis


def test_a_log_axis_is_ticked_with_plain_numbers_that_span_the_values():
    axis = log_axis([0.45, 3.2, 13.6], "FLOPs per byte")
    assert axis["type"] == "log" and axis["tickvals"] == [0.2, 0.5, 1, 2, 5, 10, 20]
    assert axis["ticktext"] == ["0.2", "0.5", "1", "2", "5", "10", "20"]  # not plotly's "10, 2, 3" minor labels
    wide = log_axis([4.6, 48.0, 2_000.0], "GFLOP/s")
    assert wide["tickvals"][0] <= 4.6 and wide["tickvals"][-1] >= 2_000 and "1,000" in wide["ticktext"]
    assert log_axis([0, -1], "none") == {"type": "log", "title": "none"}  # nothing positive to span: plotly's own


def test_a_long_question_is_quoted_by_its_first_words():
    from ui.words import shortened

    long = " ".join(["Tomatoes are fruits."] * 40)
    assert shortened("Are tomatoes fruit?") == "Are tomatoes fruit?"
    cut = shortened(long, 50)
    assert cut.endswith("…") and len(cut) <= 51 and long.startswith(cut[:-1]) and not cut[:-1].endswith(" ")
    assert shortened("토마토는과일인가요" * 20, 12) == "토마토는과일인가요토마토…"  # no space: cut at the limit
