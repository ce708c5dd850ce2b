"""Downloads in a real browser: the run as JSON and the HTML report from the sidebar's export box, the report opened
with the network blocked, and every chart as PNG and SVG, with no request to any host but the app's own (Debian's
chromium through Playwright; the server runs the tiny random-weight model: kit.browser_fixtures' `tiny_server`)."""
import json
import os
import re
from pathlib import Path
from urllib.parse import urlencode, urlparse

import pytest
from kit.browser import (CHROMIUM, SHOTS, events, give_back, open_expander, open_offline, settle, until, visit,
                         warm_context)

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]


@pytest.fixture(scope="module")
def server(tiny_server):
    return tiny_server


@pytest.fixture(scope="module")
def browser(server, chromium):
    """The module's Chromium (kit.browser_fixtures), once its server is up."""
    return chromium


def download(page, button, name: str, said: list[str]):
    """The file a click on `button` downloads, told apart from a click that brings none."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:  # an ordinary download of a file made before; the click runs nothing else
        with page.expect_download(timeout=120_000) as info:
            button.click()
    except PlaywrightTimeout:
        page.screenshot(path=str(SHOTS / f"room_{name}_no_download.png"), full_page=True)
        shown = page.locator('[data-testid="stDownloadButtonError"]').all_inner_texts()
        raise AssertionError(f"no {name} downloaded; the button said {shown}, the console said {said}; "
                             f"page events {events(page)}") from None
    return info.value


def test_the_json_and_the_html_report_download_and_the_report_opens_with_the_network_blocked(server, browser,
                                                                                             tmp_path):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    context = warm_context(browser)
    question = "Are tomatoes fruit?"
    page = visit(context, f"{server}/journey?{urlencode({'q': question})}")
    said = []  # what the page's console said, for a download that never came
    page.on("console", lambda m: said.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    open_expander(page, "Share or export this view")
    page.get_by_role("button", name=re.compile("Make the downloads")).click()  # made on the server, for this request
    settle(page)
    as_json = page.get_by_role("button", name=re.compile("Download the run as JSON"))
    try:  # drawn once the files are made
        as_json.wait_for(state="visible", timeout=60_000)
    except PlaywrightTimeout:
        page.screenshot(path=str(SHOTS / "room_downloads_no_button.png"), full_page=True)
        raise AssertionError(f"no download buttons in the sidebar's export box; the console said {said}; "
                             f"page events {events(page)}") from None
    run = json.loads(Path(download(page, as_json, "JSON", said).path()).read_text(encoding="utf-8"))
    assert run["request"]["openai"]["messages"][-1]["content"] == question  # the run of the request shown
    path = tmp_path / "report.html"
    download(page, page.get_by_role("button", name=re.compile("Download the report")), "report", said).save_as(path)
    give_back(context)
    report, asked = open_offline(browser, path, min_plots=10)
    assert report.locator("h2").count() == 12
    assert report.locator(".js-plotly-plot .main-svg").count() >= 10  # charts drawn by the embedded plotly.js
    assert asked == []
    report.screenshot(path=str(SHOTS / "room_report_offline.png"))
    report.context.close()


def test_every_chart_downloads_as_png_and_svg_without_leaving_the_machine(server, browser, tmp_path):
    # a new context, not a warm one (kit.browser.warm_context): its empty HTTP cache fetches every resource the page
    # uses, so every host it would ask is seen asked
    context = browser.new_context(viewport={"width": 1300, "height": 1000})
    hosts = set()
    context.on("request", lambda r: hosts.add(urlparse(r.url).netloc) if r.url.startswith("http") else None)
    page = visit(context, f"{server}/kv-cache")
    # Every chart gets its button once the page's last run has drawn it (ui/chart_export.py adds it beside the
    # camera); the modebar shows only while the mouse is over a chart drawn before the hover (a hover on a chart
    # that is drawn again afterwards shows nothing: the cause of a flaky 'no .tpe-svg in 30 s').
    until(page, "() => { const plots = [...document.querySelectorAll('.js-plotly-plot')];"
          " return plots.length > 0 && plots.every(p => p.querySelector('.tpe-svg')); }", timeout_s=30)
    plot = page.locator(".js-plotly-plot").first
    plot.hover()
    plot.locator(".tpe-svg").wait_for(state="visible", timeout=30_000)
    with page.expect_download() as svg:
        plot.locator(".tpe-svg").click()
    svg.value.save_as(tmp_path / "chart.svg")
    assert (tmp_path / "chart.svg").read_text().startswith("<svg")
    plot.hover()
    with page.expect_download() as png:
        plot.locator('.modebar-btn[data-title^="Download plot"]').first.click()
    png.value.save_as(tmp_path / "chart.png")
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert hosts == {urlparse(server).netloc}
    context.close()
