"""End to end in a real browser: Debian's chromium driven by Playwright against the real server.

Moves the temperature slider, draws 1,000 times, selects a head, then visits every page with a question holding
HTML (which must show as text), saving a screenshot of each under artifacts/browser/, and checks that no request
left the machine; on Compare models, the Korean question's chips are drawn where a reader sees them. The server
runs the tiny random-weight model (kit.browser_fixtures' `tiny_server`): what is checked here is layout,
controls and escaping, not what the real weights answer.
"""
import os
import re
from urllib.parse import urlencode, urlparse

import pytest
from kit.browser import CHROMIUM, SHOTS, choose, settle, shared_tab, watch

EVIL = "<img src=x onerror=alert(1)> <s>Are tomatoes fruit?</s>"

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]


@pytest.fixture(scope="module")
def server(tiny_server):
    return tiny_server


@pytest.fixture(scope="module")
def context(chromium):
    """The module's browser context (kit.browser_fixtures' Chromium): the shared page below, and tabs of their own.
    A new context, not a warm one: its empty HTTP cache fetches every resource, so the page's hosts are all seen."""
    context = chromium.new_context(viewport={"width": 1400, "height": 3000})
    yield context
    context.close()


@pytest.fixture(scope="module")
def browser_page(server, context):
    """The page most tests here share: the app's first page drawn once for them."""
    page = watch(context.new_page())
    page.dialogs = []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.hosts = set()  # every host the page asked for anything (scripts, fonts, images, the app's socket)
    page.on("request", lambda r: page.hosts.add(urlparse(r.url).netloc) if r.url.startswith("http") else None)
    page.goto(server)
    settle(page, timeout=300)  # first run: model load and the default request's trace
    yield page
    page.close()


def page_titles() -> list[str]:
    from views.chrome.page_list import PAGES

    # Presenter mode hides the sidebar these tests navigate with; tests/browser/test_browser_room.py walks it.
    return [p.title for p in PAGES if p.title != "Presenter mode"]


def open_page(page, title: str) -> None:
    page.locator('[data-testid="stSidebar"] a[data-testid="stPageLink-NavLink"]', has_text=title).first.click()
    settle(page)


def forward_passes(page) -> int:
    text = page.locator('[data-testid="stSidebar"]').inner_text()
    return int(re.search(r"Forward passes run for your session: (\d+)", text).group(1))


def check_page(page, name: str) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0, f"{name}: the page raised an exception"
    assert page.locator("h1").count() >= 1, f"{name}: no title rendered"
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def slug(title: str) -> str:
    return re.sub(r"\W+", "_", title.lower()).strip("_")


def test_temperature_slider_and_1000_draws_do_not_run_the_model(browser_page):
    open_page(browser_page, "Next token")  # settled: the sidebar shows the session's count once the run is over
    before = forward_passes(browser_page)
    main = browser_page.locator('[data-testid="stMain"]')
    slider = main.locator('[data-testid="stSlider"]', has_text="temperature").locator('input[type="range"]').first
    value_before = slider.input_value()
    slider.focus()
    for _ in range(6):
        browser_page.keyboard.press("ArrowRight")
    settle(browser_page)
    assert slider.input_value() != value_before
    draws = main.locator('[data-testid="stSlider"]', has_text="number of draws").locator('input[type="range"]').first
    assert draws.get_attribute("aria-valuetext") == "1000"  # the default: 1,000 draws
    browser_page.get_by_role("button", name=re.compile("Draw again")).click()
    settle(browser_page)
    assert browser_page.get_by_text(re.compile(r"1,?000 draws")).count() > 0
    # the sampler is a fragment: its reruns leave the sidebar alone. Opening the page again reruns the whole
    # script, and the sidebar then shows this session's total, which must not have grown.
    open_page(browser_page, "Next token")
    assert forward_passes(browser_page) == before, "moving a sampling slider ran the model again"
    check_page(browser_page, "next_token_after_draws")


# The head the overview's red frame marks, from its shape and the tiles' spacing (plotly's own layout): (layer, head)
FRAMED = """() => { const gd = document.querySelector('.st-key-at_overview .js-plotly-plot');
    const full = gd._fullLayout, frame = full.shapes[0], stride = full.yaxis.tickvals[1] - full.yaxis.tickvals[0];
    return [(frame.x0 + 1) / stride, (frame.y0 + 1) / stride]; }"""


def test_select_a_head(browser_page):
    open_page(browser_page, "Attention")
    box = browser_page.locator('[data-testid="stMain"] [data-testid="stSelectbox"]', has_text="query head").first
    shown = int(re.match(r"head (\d+)", box.locator("input").first.input_value()).group(1))  # the run's opening head
    layer, framed = browser_page.evaluate(FRAMED)
    assert framed == shown, (layer, framed, shown)
    head = 0 if shown else 1  # another: picking the head shown runs nothing
    choose(browser_page, box, re.compile(rf"^head {head} "), shot=SHOTS / "attention_head_list_not_open.png")
    settle(browser_page)  # the head picker's fragment reruns and marks its end
    title = re.compile(rf"layer \d+, head {head} \((full attention|sliding window of [\d,]+)\): attention weights")
    assert browser_page.get_by_text(title).count() == 1
    assert browser_page.evaluate(FRAMED) == [layer, head]  # the overview frames the head shown, not the one before
    check_page(browser_page, f"attention_head_{head}")


def test_every_page_renders_html_in_the_question_as_text_and_asks_no_other_host(browser_page, server):
    """Every page through the sidebar with a question holding HTML, then presenter mode by its link (it hides the
    sidebar): no exception, no empty chart, the HTML shown as text (no element, no script), and no request leaves
    the machine (the room works offline; a font or script from a CDN would not). The default question's pages are
    drawn by the other tests here and, page by page, by the AppTests."""
    sidebar = browser_page.locator('[data-testid="stSidebar"]')
    sidebar.locator("textarea").first.fill(EVIL)
    sidebar.get_by_role("button", name="Run the model").click()
    settle(browser_page, timeout=300)
    titles = page_titles()
    assert len(titles) >= 12
    for title in titles:
        open_page(browser_page, title)
        check_page(browser_page, slug(title))
        assert browser_page.locator('img[src="x"]').count() == 0, f"{title}: injected <img> became an element"
        assert browser_page.locator("[data-testid='stMain'] s").count() == 0, f"{title}: injected <s> rendered"
        plots = browser_page.locator(".js-plotly-plot")
        for i in range(plots.count()):  # an empty chart has no drawn traces
            assert plots.nth(i).locator("g.trace, g.heatmaplayer image, g.hm, path.point").count() > 0 or \
                plots.nth(i).locator("g.cartesianlayer g.plot > *").count() > 0, f"{title}: chart {i} is empty"
    open_page(browser_page, "Tokens")
    assert browser_page.get_by_text(re.compile(r"<img|img")).count() > 0
    assert browser_page.dialogs == [], "a script in the question ran"
    browser_page.goto(f"{server}/presenter")
    settle(browser_page)
    assert browser_page.locator('[data-testid="stException"]').count() == 0, "presenter mode raised an exception"
    assert browser_page.hosts == {urlparse(server).netloc}, f"requests left the machine: {browser_page.hosts}"


def test_a_lone_surrogate_typed_in_a_box_is_removed_with_a_note_naming_the_box(browser_page, server):
    """ui/text_guard.py. Before it, Streamlit's frontend wrote the lone surrogate as bytes that are not UTF-8, the
    server refused the message and closed the connection ("Error deserializing back message"): the edit was lost
    without a word. Typed through the browser's own editing (execCommand insertText), as a paste arrives."""
    browser_page.goto(f"{server}/tokens")  # by its address: the test before may leave presenter mode (no sidebar)
    settle(browser_page)
    box = browser_page.get_by_label("Text to tokenize")
    box.click()
    box.press("Control+a")
    browser_page.evaluate("() => document.execCommand('insertText', false, 'tomato' + String.fromCharCode(0xD800) + "
                          "'plum')")
    box.press("Control+Enter")  # the box sends its value
    assert box.input_value() == "tomatoplum"
    note = browser_page.locator("#tpe-text-guard").inner_text()
    assert note.startswith("Removed 1 character from “Text to tokenize”: a lone surrogate"), note
    # the server got the edit: the page's run shows the text back (waited for as such: that run drew no newer
    # end-of-run mark in a whole-suite run, not explained)
    browser_page.get_by_text("tomatoplum", exact=True).first.wait_for(timeout=120_000)
    check_page(browser_page, "tokens_lone_surrogate")


# Chips (ui/more_below.py): on Compare models, the Korean question's chips in each model's column are drawn where a
# reader sees them, not clipped by a box of fixed height (SmolLM2's column once hid all of them below its system
# prompt, with no cue). Tiny models; screenshot artifacts/browser/readable_compare_korean.png.
KOREAN = "토마토는 과일인가요?"
# For each chip of the user's turn (its title ends in '· user'): the part of it that no clipping box around it inside
# its column (overflow other than visible) cuts off, as a share of its own area. 1 = wholly inside every such box.
SHOWN_SHARES = """() => [...document.querySelectorAll('[data-testid="stMain"] span[title*="· user"]')].map(chip => {
    let r = chip.getBoundingClientRect(); let [l, t, rr, b] = [r.left, r.top, r.right, r.bottom];
    for (let a = chip.parentElement; a && !a.matches('[data-testid="stColumn"], [data-testid="stMain"]');
         a = a.parentElement) {  // the boxes drawn around the chips, not the page's own scrolling
        const s = getComputedStyle(a);
        if (s.overflowX === 'visible' && s.overflowY === 'visible') continue;
        const c = a.getBoundingClientRect();
        l = Math.max(l, c.left); t = Math.max(t, c.top); rr = Math.min(rr, c.right); b = Math.min(b, c.bottom);
    }
    const area = r.width * r.height;
    return area ? Math.max(0, rr - l) * Math.max(0, b - t) / area : 0; })"""


def test_the_korean_question_shows_in_both_columns_of_compare(context, server):
    """On a tab of its own (its own session, a 1000-pixel-high window), beside the page the other tests share."""
    with shared_tab(context, height=1000) as page:
        page.goto(f"{server}/compare-models?{urlencode({'q': KOREAN})}")
        settle(page)
        main = page.locator('[data-testid="stMain"]')
        main.get_by_text("2. The prompt each model reads").wait_for(timeout=300_000)  # the comparison, once done
        main.locator('span[title*="· user"]').first.wait_for(timeout=60_000)
        assert page.locator('[data-testid="stException"]').count() == 0
        main.get_by_text("2. The prompt each model reads").evaluate("e => e.scrollIntoView({block: 'start'})")
        page.screenshot(path=str(SHOTS / "readable_compare_korean.png"))
        shares = page.evaluate(SHOWN_SHARES)
        assert len(shares) >= 2 * 7, shares  # both columns: at least one chip per character of the question
        assert min(shares) > 0.99, f"user chips clipped: {shares}"
