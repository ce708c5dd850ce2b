"""Counts, ratios and changes as the pages write them: one plural helper (a count of 1 takes the singular
everywhere), a speed-up that reads the right way round, and no colour for a change that shows as zero."""
import re
from types import SimpleNamespace

import pytest

from pipeline.core.timing import compare_runs
from ui.metric_delta import metric_delta

ONE_PLURAL = re.compile(r"(?<![\d.,])1 (tokens|requests|runs|positions|steps|passes|layers|heads|words|characters"
                        r"|rows|blocks|answers)\b")


def test_one_plural_helper_for_pages_and_pipeline():
    from pipeline.text.counts import plural
    from ui import words

    assert words.plural is plural
    assert plural(1, "request") == "1 request" and plural(1_234, "request") == "1,234 requests"


def test_a_speed_ratio_reads_the_right_way_round():
    faster = compare_runs([0.55, 0.56, 0.54], [1.0, 1.01, 0.99])  # A takes 0.55 of B's time
    assert faster.speed() == "1.8× faster"
    assert compare_runs([1.3, 1.31], [1.0, 1.01]).speed() == "1.3× slower"
    assert compare_runs([1.0], [1.0]).speed() == "as fast"


def test_the_weight_formats_table_says_faster_or_slower_not_a_bare_ratio():
    from views.pages.faster_decode.weights import formats_tables

    row = SimpleNamespace(parameter_bytes=1, bytes_per_token=1, kl_mean=0.0, kl_max=0.0, top1_agreement=1.0,
                          same_greedy=True, first_difference=None)
    t = SimpleNamespace(median=0.01, low=0.01, high=0.01)
    report = SimpleNamespace(rows={"fp32": row, "int8": row}, tpot={"fp32": t, "int8": t},
                             vs_fp32={"int8": compare_runs([0.55, 0.56], [1.0, 1.01])})
    assert list(formats_tables(report)[0]["vs fp32"]) == ["—", "1.8× faster"]


def test_a_change_that_shows_as_zero_has_no_sign_colour_or_arrow():
    assert metric_delta(0.001, "+.0%", " vs $0.0100 uncached", lower_is_better=True) == {
        "delta": "0% vs $0.0100 uncached", "delta_color": "off", "delta_arrow": "off"}
    assert metric_delta(-0.0001, "+.3f") == {"delta": "0.000", "delta_color": "off", "delta_arrow": "off"}
    assert metric_delta(0.25, "+.0%", lower_is_better=True) == {
        "delta": "+25%", "delta_color": "inverse", "delta_arrow": "auto"}


def page_texts(at) -> list[str]:
    kinds = ("markdown", "caption", "info", "warning", "error", "success", "subheader")
    return [e.value for kind in kinds for e in at.get(kind)] + [str(m.proto) for m in at.get("metric")]


def test_a_one_request_log_says_request_not_requests(tiny_app):
    from kit.apptest import page_app

    at = page_app("cache_audit", ca_source="Paste")
    at.run()
    at.text_area(key="ca_text").set_value('{"messages": [{"role": "user", "content": "Are tomatoes fruit?"}]}')
    at.button(key="ca_go").click().run()
    assert not at.exception, [e.message for e in at.exception]
    texts = page_texts(at)
    assert any("1 request " in t or "1 request)" in t for t in texts), texts
    assert not [t for t in texts if ONE_PLURAL.search(t)]


@pytest.mark.parametrize("view", ["prefill_decode", "journey", "generation"])
def test_pages_on_a_one_token_answer_write_no_plural_after_1(tiny_app, view):
    from kit.apptest import page_app

    at = page_app(view, req_max_new_tokens=1)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    bad = [ONE_PLURAL.search(t).group(0) for t in page_texts(at) if ONE_PLURAL.search(t)]
    assert not bad, bad


def test_first_values_fit_a_narrow_cell():
    from ui.words import first_values

    ids = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173]  # SmolLM2's prompt ids: 8 of them did not fit
    assert first_values(ids) == "[1, 9690, 198, 2683, 359, …]" and len(first_values(ids)) <= 30
    assert first_values(list(range(60))) == "[0, 1, 2, 3, 4, 5, 6, 7, …]"
    assert first_values([1, 2, 3]) == "[1, 2, 3]"


def test_token_axis_ticks_never_pile_up_on_neighbouring_columns():
    import plotly.graph_objects as go

    from ui.plots import token_axis

    labels = [f"({i})" for i in range(261)]  # 4 sink columns, a summed one, then 256 key positions
    fig = go.Figure()
    token_axis(fig, "x", labels, always=range(5))
    kept = [labels.index(v) for v in fig.layout.xaxis.tickvals]
    assert 4 in kept and 260 in kept and len(kept) <= 41  # the summed column and the last stay
    assert min(b - a for a, b in zip(kept, kept[1:])) >= 7  # the 7-column spacing, at least (4 overlapped)
    few = go.Figure()
    token_axis(few, "x", labels[:20], always=range(3))
    assert list(few.layout.xaxis.tickvals) == labels[:20]  # a short axis keeps every label
