"""The offline HTML report (ui/report.py): the plotly.js it inlines registers every trace type its figures
use, and its tick labels stay inside each figure, also when it is built inside the app (Streamlit's
plotly template, which leaves automargin off). The browser test draws it in Chromium with no network."""
import json
import os
import re

import plotly
import plotly.io as pio
import pytest
from plotly.offline import get_plotlyjs

from pipeline.run.trace import run_trace
from pipeline.stages.request import ChatRequest, GenerationOptions
from ui.report import PLOTLY_BUNDLE, plotly_js, trace_report


def figures(html: str) -> list[tuple[list, dict]]:
    """(data, layout) of every Plotly.newPlot call in the page, read as JSON."""
    out, decoder = [], json.JSONDecoder()
    for match in re.finditer(r"Plotly\.newPlot\(\s*", html):
        _, at = decoder.raw_decode(html, match.end())  # the div id
        at = html.index("[", at)
        data, at = decoder.raw_decode(html, at)
        at = html.index("{", at)
        layout, _ = decoder.raw_decode(html, at)
        out.append((data, layout))
    return out


def registered_traces(bundle: str) -> set[str]:
    """Trace types a plotly.js bundle registers (each trace module declares moduleType "trace" and its name)."""
    return set(re.findall(r'moduleType:"trace",name:"(\w+)"', bundle))


def plotly_js_version(bundle: str) -> str:
    return re.search(r"plotly\.js (?:\([^)]*\) )?v(\d+\.\d+\.\d+)", bundle[:400]).group(1)


@pytest.fixture
def app_template(monkeypatch):
    """The default template inside the app: importing Streamlit's plotly element sets it to 'streamlit'."""
    import streamlit.elements.plotly_chart  # noqa: F401

    monkeypatch.setattr(pio.templates, "default", "streamlit")


@pytest.fixture(scope="module")
def tiny_report_trace(tiny_lm):
    return run_trace(ChatRequest.from_question("Are tomatoes fruit?", options=GenerationOptions(max_new_tokens=4)),
                     tiny_lm)


def test_the_report_inlines_the_vendored_partial_bundle_matching_plotly_py():
    bundle = plotly_js()
    assert PLOTLY_BUNDLE.parent.joinpath("LICENSE").read_text().startswith("MIT License")
    # the figures are written by plotly.py for the plotly.js it bundles: same version as the vendored file
    assert plotly_js_version(bundle) == plotly_js_version(get_plotlyjs()), plotly.__version__
    assert len(bundle) < len(get_plotlyjs()) / 3
    assert {"heatmap", "bar", "scatter"} <= registered_traces(bundle) < registered_traces(get_plotlyjs())


def test_every_trace_type_of_the_report_is_in_its_bundle(tiny_report_trace, app_template):
    html = trace_report(tiny_report_trace)
    assert plotly_js() in html and get_plotlyjs() not in html
    assert len(html.encode()) < 2_000_000
    used = {trace["type"] for data, _ in figures(html) for trace in data}
    assert used == {"heatmap", "bar", "scatter"}
    assert used <= registered_traces(plotly_js())


def test_report_axes_grow_their_margins_to_fit_the_labels_inside_the_app(tiny_report_trace, app_template):
    drawn = figures(trace_report(tiny_report_trace))
    assert len(drawn) == tiny_report_trace.dims.H + 4  # embeddings, layers, one per head, logits, KV cache
    for _, layout in drawn:
        axes = [k for k in layout if re.fullmatch(r"[xy]axis\d*", k)]
        assert {"xaxis", "yaxis"} <= set(axes)
        assert all(layout[k].get("automargin") is True for k in axes), layout.get("title")


# ---- browser: drawn offline in Chromium, bounding boxes measured ----

MEASURE = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(plot => {
  const svg = plot.querySelector('.main-svg').getBoundingClientRect();
  const out = [];
  plot.querySelectorAll('.xtick text, .ytick text, .gtitle, .g-xtitle text, .g-ytitle text').forEach(t => {
    const b = t.getBoundingClientRect();
    if (b.width === 0) return;
    const past = Math.max(svg.left - b.left, b.right - svg.right, svg.top - b.top, b.bottom - svg.bottom);
    if (past > 0.5) out.push(t.textContent + ' ' + Math.round(past) + ' px');
  });
  return {types: plot.data.map(d => d.type), labels: plot.querySelectorAll('.xtick text, .ytick text').length,
          outside: out};
})"""


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists("/usr/bin/chromium"), reason="Debian's chromium is not installed")
def test_the_report_draws_offline_with_every_label_inside_its_figure(default_trace, app_template, tmp_path):
    from kit.browser import CHROMIUM, CHROMIUM_ARGS, SHOTS, until
    from playwright.sync_api import sync_playwright

    path = tmp_path / "report.html"
    path.write_text(trace_report(default_trace), encoding="utf-8")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(offline=True, viewport={"width": 1200, "height": 900})
        asked = []
        context.on("request", lambda r: asked.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
        page = context.new_page()
        page.goto(path.as_uri())
        n_figures = len(figures(path.read_text(encoding="utf-8")))
        until(page, f"() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= {n_figures}")
        page.evaluate("() => document.fonts.ready")
        plots = page.evaluate(MEASURE)
        registered = set(page.evaluate("() => Object.keys(Plotly.PlotSchema.get().traces)"))
        page.screenshot(path=str(SHOTS / "report_offline.png"), full_page=True)
        browser.close()
    assert asked == []
    assert len(plots) == n_figures and all(plot["labels"] > 0 for plot in plots)
    assert {t for plot in plots for t in plot["types"]} <= registered
    assert [plot["outside"] for plot in plots] == [[]] * n_figures


def test_the_reports_json_keeps_lists_of_ids_on_one_line(tiny_report_trace):
    """The completed event's token ids were one per line (a page of digits at the end of the report)."""
    import html as html_module
    import json
    import re

    page = trace_report(tiny_report_trace)
    blocks = [html_module.unescape(b) for b in re.findall(r"<pre>(.*?)</pre>", page, re.S)]
    completed = next(b for b in blocks if '"generated_token_ids"' in b)
    assert json.loads(completed)["generated_token_ids"] == tiny_report_trace.generated_token_ids
    ids_line = next(line for line in completed.splitlines() if '"generated_token_ids"' in line)
    assert ids_line.rstrip(",").endswith("]")  # the whole list on its own line
