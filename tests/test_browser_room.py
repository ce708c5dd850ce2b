"""A workshop room in a real browser: links that reproduce a view, presenter mode, the offline
report, and no request to any host but the app's own (Debian's chromium through Playwright)."""
import os
import re
from urllib.parse import parse_qs, quote, urlparse

import pytest

from browser_kit import CHROMIUM, CHROMIUM_ARGS, ROOT, SHOTS, app_server, settle

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]


@pytest.fixture(scope="module")
def server():
    with app_server("browser-room-server.log") as url:
        yield url


@pytest.fixture(scope="module")
def browser(server):
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


def chart_titles(page) -> str:
    """The titles drawn inside the plotly charts (SVG text, not part of the page's innerText)."""
    return " | ".join(page.locator(".js-plotly-plot .gtitle").all_text_contents())


def visit(context, url: str):
    page = context.new_page()
    page.goto(url)
    settle(page)
    return page


def test_no_page_asks_any_other_host(server, browser):
    context = browser.new_context(viewport={"width": 1300, "height": 1000})
    hosts = set()
    context.on("request", lambda r: hosts.add(urlparse(r.url).netloc) if r.url.startswith("http") else None)
    paths = re.findall(r'"([\w-]+)"\),?\n', (ROOT / "app.py").read_text())
    assert {"journey", "attention", "presenter", "cache-audit"} <= set(paths)
    for path in paths:
        page = visit(context, f"{server}/{path}")
        assert page.locator('[data-testid="stException"]').count() == 0, path
        page.close()
    context.close()
    assert hosts == {urlparse(server).netloc}, f"requests left the machine: {hosts}"


def test_a_bookmarked_page_opens_that_page(server, browser):
    context = browser.new_context()
    page = visit(context, f"{server}/journey")
    assert page.locator("h1").first.inner_text().strip() == "Journey"
    assert "Page not found" not in page.inner_text("body")
    context.close()


def test_a_copied_link_reproduces_the_view_in_another_browser(server, browser):
    question = "Why is the sky blue?"
    first = browser.new_context(viewport={"width": 1300, "height": 1200})
    page = visit(first, f"{server}/attention?q={quote(question)}&max_new_tokens=8&layer=3&head=2")
    assert "layer 3, head 2" in chart_titles(page)
    page.locator("summary", has_text="Share or export this view").first.click()
    link = page.locator('[data-testid="stSidebar"] code').filter(has_text="/attention").first.inner_text().strip()
    params = parse_qs(urlparse(link).query)
    assert params["q"] == [question] and params["layer"] == ["3"] and params["head"] == ["2"]
    page.screenshot(path=str(SHOTS / "room_link_source.png"))
    second = browser.new_context(viewport={"width": 1300, "height": 1200})  # a fresh browser: no shared state
    again = visit(second, link)
    assert "layer 3, head 2" in chart_titles(again)
    assert again.locator("textarea").first.input_value() == question
    again.screenshot(path=str(SHOTS / "room_link_reopened.png"))
    first.close()
    second.close()


def test_tampered_links_fall_back_with_a_note(server, browser):
    context = browser.new_context()
    page = visit(context, f"{server}/attention?layer=abc&head=99&temperature=hot&q=%3Cb%3Ehi%3C/b%3E")
    body = page.inner_text("body")
    assert page.locator('[data-testid="stException"]').count() == 0
    assert "The link's layer was not usable" in body and "The link's temperature was not usable" in body
    assert page.locator("b", has_text="hi").count() == 0  # the question is text, not markup
    context.close()


def test_presenter_walks_all_stages_with_the_keyboard(server, browser):
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    page = visit(context, f"{server}/presenter")
    assert page.locator("h1").first.inner_text().startswith("1.")
    assert page.locator('[data-testid="stSidebar"]').is_hidden()
    for n in range(2, 14):
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"() => document.querySelector('h1') && "
                               f"document.querySelector('h1').innerText.startsWith('{n}.')", timeout=120_000)
        settle(page)
        assert page.locator('[data-testid="stException"]').count() == 0, f"stage {n}"
    page.screenshot(path=str(SHOTS / "room_presenter_13.png"))
    page.keyboard.press("ArrowLeft")
    page.wait_for_function("() => document.querySelector('h1').innerText.startsWith('12.')", timeout=60_000)
    settle(page)  # the link is rewritten once the screen has run
    assert "stage=12" in page.url
    context.close()


def test_the_html_report_opens_from_disk_with_the_network_blocked(server, browser, tmp_path):
    context = browser.new_context(accept_downloads=True)
    page = visit(context, f"{server}/journey")
    page.locator("summary", has_text="Share or export this view").first.click()
    with page.expect_download(timeout=120_000) as download:
        page.get_by_role("button", name=re.compile("Download a report")).click()
    path = tmp_path / "report.html"
    download.value.save_as(path)
    context.close()
    offline = browser.new_context(offline=True)
    asked = []
    offline.on("request", lambda r: asked.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
    report = offline.new_page()
    report.goto(path.as_uri())
    report.wait_for_timeout(2000)
    assert report.locator("h2").count() == 12
    assert report.locator(".js-plotly-plot .main-svg").count() >= 10  # charts drawn by the embedded plotly.js
    assert asked == []
    report.screenshot(path=str(SHOTS / "room_report_offline.png"))
    offline.close()


def test_every_chart_downloads_as_png_and_svg_without_leaving_the_machine(server, browser, tmp_path):
    context = browser.new_context(accept_downloads=True, viewport={"width": 1300, "height": 1000})
    hosts = set()
    context.on("request", lambda r: hosts.add(urlparse(r.url).netloc) if r.url.startswith("http") else None)
    page = visit(context, f"{server}/kv-cache")
    plot = page.locator(".js-plotly-plot").first
    plot.hover()
    page.wait_for_selector(".tpe-svg", timeout=30_000)
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


def test_a_korean_question_reads_as_korean_on_every_page(server, browser):
    """Every page names a Korean token by its character (토), not only by its bytes (<0xED>)."""
    question = "토마토는 과일이야?"
    context = browser.new_context(viewport={"width": 1300, "height": 1000})
    # the pages that name prompt tokens (chips, axes, tables, titles); every other page is opened with a
    # Korean question by the AppTests in test_any_script.py
    paths = ["journey", "request", "tokens", "attention", "next-token"]
    for path in paths:
        page = visit(context, f"{server}/{path}?q={quote(question)}&max_new_tokens=8")
        assert page.locator('[data-testid="stException"]').count() == 0, path
        text = page.inner_text("body") + " ".join(page.locator(".js-plotly-plot").all_text_contents())
        assert "토" in text, f"{path}: no Korean character on the page"
        page.screenshot(path=str(SHOTS / f"room_korean_{path}.png"))
        page.close()
    context.close()
