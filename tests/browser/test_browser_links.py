"""Links in a real browser: a phishing link shows its text literally, with no live link; shared links reproduce a
view; Back and Forward move between pages, and a reload during a run keeps the question
typed."""
import os
import re

import pytest
from kit.browser import CHROMIUM, SHOTS, choose, question_shown, run_mark, settle, share_link, shared_tab, until

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

PHISHING_QUERY = "seed=%5BSession%20expired%3A%20log%20in%20again%5D%28http%3A//evil.example/login%29"
SLOW = "(a slow run)"  # a question holding it runs slowly on the module's server (kit.slow_app)


@pytest.fixture(scope="module")
def server(tiny_server_cache, tmp_path_factory):
    """The module's one app server, on the tiny models: app.py slowed only on the runs whose question holds SLOW
    (kit.slow_app), for the reload test; every other run is as usual. One server's start, first page and warm-up
    for the file instead of two (a plain one and a slowed one)."""
    from kit.slow_app import slowed_app_server

    with slowed_app_server(tmp_path_factory.mktemp("slowed"), "browser-links.log", tiny_server_cache,
                           mark=SLOW, host="localhost") as (url, _):
        yield url


@pytest.fixture(scope="module")
def browser(chromium):
    """The context of the module's pages, the tests taking turns on its one tab (kit.browser.shared_tab), each
    address a session of its own. The app keeps no cookie or storage that these pages read (a session is its page's
    socket)."""
    context = chromium.new_context()
    yield context
    context.close()


@pytest.fixture(scope="module")
def link_opener(chromium):
    """A second context, where the shared links are opened: a browser that never held the page that made the
    link, so no cookie, storage or session of it."""
    context = chromium.new_context()
    yield context
    context.close()


def test_a_tampered_parameter_shows_its_text_not_a_link(server, browser):
    with shared_tab(browser, height=1600) as page:
        page.goto(f"{server}/journey?{PHISHING_QUERY}")
        settle(page, timeout=300)
        page.screenshot(path=str(SHOTS / "phishing_link.png"))
        warning = page.locator('[data-testid="stAlertContentWarning"]', has_text="was not usable")
        assert warning.count() == 1
        shown = warning.inner_text().replace("\u2060", "")
        assert "[Session expired: log in again](http://evil.example/login)" in shown, shown
        assert page.locator('a[href*="evil.example"]').count() == 0
        assert page.locator('[data-testid="stException"]').count() == 0


# Run from the repository's root, as the app is (tests/browser_kit.py), so it draws with this checkout's ui/.
SCRIPT = """
import streamlit as st
from ui.escape import code_span, markdown_text
for i, text in enumerate({hostile!r}):
    st.warning(f"raw {{i}}: " + text)
    st.warning(f"escaped {{i}}: " + markdown_text(text))
    st.caption(f"code {{i}}: " + code_span(text))
from views.chrome.frame import run_marker
run_marker()  # what settle() waits for, as app.py draws it
"""


def test_streamlits_own_renderer_links_the_raw_texts_but_not_the_escaped(tmp_path, browser):
    """The Markdown model in tests/markdown_links.py checked against the real renderer: every hostile text
    is a live link when shown raw, and none is through markdown_text or code_span."""
    import subprocess
    import sys

    from kit.browser import ROOT
    from kit.markdown_links import HOSTILE

    from pipeline.server.health import free_port, wait_healthy

    script = tmp_path / "hostile.py"
    script.write_text(SCRIPT.format(hostile=HOSTILE))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(script), "--server.port", str(port),
                             "--server.headless", "true", "--browser.gatherUsageStats", "false",
                             "--client.showErrorDetails", "full"],  # the project's config shows none
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_healthy(f"http://localhost:{port}")
        with shared_tab(browser, width=1200, height=3000) as page:
            page.goto(f"http://localhost:{port}")
            settle(page, timeout=120)
            page.screenshot(path=str(SHOTS / "hostile_markdown.png"), full_page=True)
            boxes = page.locator('[data-testid="stAlertContentWarning"], [data-testid="stCaptionContainer"]')
            found = {}
            for n in range(boxes.count()):
                box = boxes.nth(n)
                found[box.inner_text().split(":")[0].strip()] = box.locator("a[href], img[src]").count()
            page.goto("about:blank")  # off this server before it stops: the tab goes on to the module's next test
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert found, "the script drew no box: it failed (its error is on the screenshot hostile_markdown.png)"
    for i in range(len(HOSTILE)):
        assert found.get(f"escaped {i}") == 0 and found.get(f"code {i}") == 0, (i, HOSTILE[i], found)
    linked_raw = [HOSTILE[i] for i in range(len(HOSTILE)) if found.get(f"raw {i}")]
    assert len(linked_raw) >= len(HOSTILE) - 2, linked_raw  # the renderer does link them (raw HTML is not drawn)


# A link reproduces a view. Each page: controls set in the browser, the share box's link opened in a fresh
# context (no shared state), and the same request, controls and page text found there.
MAIN = '[data-testid="stMain"] '
CONTROLS = ("""() => { const q = s => [...document.querySelectorAll(s)]; const out = [];
  for (const s of q(MAIN + '[role="slider"]')) out.push('slider ' + s.getAttribute('aria-valuetext'));
  for (const w of q(MAIN + '[data-testid="stSelectbox"] input')) out.push('select ' + w.value);
  for (const w of q(MAIN + '[data-testid="stMultiSelect"]')) out.push('multiselect ' + w.innerText);
  for (const w of q(MAIN + 'input[type="radio"], ' + MAIN + 'input[type="checkbox"]')) out.push('check ' + w.checked);
  for (const w of q(MAIN + 'textarea, ' + MAIN + '[data-testid="stTextInput"] input, '
                    + MAIN + '[data-testid="stNumberInput"] input')) out.push('text ' + w.value);
  return out; }""").replace("MAIN", repr(MAIN))
REQUEST_BOXES = """() => [...document.querySelectorAll('[data-testid="stSidebar"] textarea, '
  + '[data-testid="stSidebar"] input, [data-testid="stSidebar"] [role="slider"]')]
  .map(w => w.getAttribute('aria-valuetext') || w.value || '')"""
TIME = re.compile(r"\d[\d,.]* ?(ms|s|min)\b")  # a measured time differs between two runs


MAIN_TEXT = r"""() => { const main = document.querySelector('[data-testid="stMain"]'); let text = main.innerText;
  for (const chart of main.querySelectorAll('[data-testid="stPlotlyChart"]')) {
    const drawn = chart.innerText; if (drawn) text = text.replace(drawn, ' '); }
  return text.replace(/\s+/g, ' '); }"""


def main_text(page) -> str:
    """The page's text, its charts left out: a chart's tick labels follow plotly's layout of the moment (the same
    data drew ticks 0, 10, 20, 30 in one browser and none yet in the other), not the view a link reproduces."""
    return TIME.sub("<time>", page.evaluate(MAIN_TEXT))


def radio(page, label: str):
    return page.locator('[data-testid="stMain"] [data-testid="stRadio"] label', has_text=label).first


def set_next_token(page):
    box = page.locator(MAIN + '[data-testid="stTextInput"]', has_text="allowed answers").locator("input")
    box.fill("Yes, Maybe")
    box.press("Enter")


def set_why_step(page):
    choose(page, page.locator(MAIN + '[data-testid="stSelectbox"]', has_text="decode step").first, re.compile(r"^2: "))


def set_words(page):
    box = page.locator('[data-testid="stMain"] textarea').first
    box.fill("apple, pear, car, bus")
    box.press("Control+Enter")


QUESTION = "q=Are%20links%20fruit%3F&max_new_tokens=4"
VIEWS = {  # page -> (the link it is first opened with, what the browser then changes)
    "next-token": ("temperature=0.8&top_k=40&top_p=0.9&min_p=0.05&seed=7&step=3&draws=1000&t=0.8", set_next_token),
    "layers": (f"{QUESTION}&ly.positions=5", lambda page: radio(page, "linear").click()),
    "why-token": (f"{QUESTION}&why.threshold=0.1", set_why_step),
    "embeddings": (QUESTION, set_words),
    "constrained": (QUESTION, lambda page: radio(page, "regular expression").click()),
}


@pytest.mark.parametrize("path", list(VIEWS))
def test_a_shared_link_opens_the_same_request_controls_and_answer(server, browser, link_opener, path):
    from urllib.parse import parse_qs, urlparse

    query, change = VIEWS[path]
    link_opener.clear_cookies()
    with shared_tab(browser, height=1600) as page, shared_tab(link_opener, height=1600) as again:
        page.goto(f"{server}/{path}?{query}")
        settle(page, timeout=300)
        opened = page.evaluate(CONTROLS)
        change(page)
        settle(page, timeout=300)
        controls = page.evaluate(CONTROLS)
        assert controls != opened, f"{path}: the change moved no control"
        link = share_link(page, path)
        again.goto(link)  # in the other context: no state shared with the page that made the link
        settle(again, timeout=300)
        again.screenshot(path=str(SHOTS / f"link_{path}.png"), full_page=True)
        assert again.locator('[data-testid="stException"]').count() == 0, path
        assert again.evaluate(REQUEST_BOXES) == page.evaluate(REQUEST_BOXES), (path, link)
        assert again.evaluate(CONTROLS) == controls, (path, link)
        assert main_text(again) == main_text(page), (path, link)
    if path == "next-token":  # the link: the request keeps its top-k and seed, the page its step
        params = parse_qs(urlparse(link).query)
        assert params["top_k"] == ["40"] and params["seed"] == ["7"] and params["nt.step"] == ["3"], link


def page_shown(page) -> tuple[str, str]:
    """(the address's path, the page's title) once the run that drew it has ended."""
    return page.evaluate("() => location.pathname"), page.locator("h1").first.inner_text()


def test_back_and_forward_move_between_pages(server, browser):
    """Journey → Tokens → Attention, then Back twice lands on Journey (drawn again, its map and first
    section there), and Forward on Tokens. Before, each run's writes to the address added entries of the same page
    (ui/history_entries.py), so Back stayed on Attention."""
    from kit.browser import open_page

    with shared_tab(browser) as page:
        page.goto(f"{server}/journey?max_new_tokens=3")
        settle(page, timeout=300)
        for title in ("Tokens", "Attention"):
            open_page(page, title)
            settle(page, timeout=300)
        assert page_shown(page) == ("/attention", "Attention")
        page.go_back()
        settle(page, timeout=300)
        assert page_shown(page) == ("/tokens", "Tokens")
        page.go_back()
        settle(page, timeout=300)
        assert page_shown(page) == ("/journey", "Journey")
        assert page.locator(".tpe-map[data-size='full']").count() == 1
        assert page.locator("h3", has_text="1. The app sends a request").count() == 1
        assert "max_new_tokens=3" in page.url  # the address as it was left
        page.go_forward()
        settle(page, timeout=300)
        assert page_shown(page) == ("/tokens", "Tokens")


def test_a_reload_during_a_run_brings_back_the_question_typed(server, browser):
    """The address holds the request from the start of the run the form started, so a reload while that
    run is still going (a slow one) brings back the question typed, not the one before. Before, the address was
    written only after the page had run."""
    with shared_tab(browser) as page:
        page.goto(f"{server}/tokens?max_new_tokens=3&q=Is%20a%20pepper%20a%20fruit%3F")
        settle(page, timeout=300)
        typed = f"Is a kiwi a berry? {SLOW}"
        box = page.locator('[data-testid="stSidebar"] textarea').first
        box.fill(typed)
        before = run_mark(page)
        page.locator('[data-testid="stSidebar"] button', has_text="Run the model").click()
        until(page, "q => new URLSearchParams(location.search).get('q') === q", arg=typed, timeout_s=60)
        # still going: no mark newer than before (the run going on has made the old one stale: run_mark says '')
        assert run_mark(page) in (before, ""), "the run ended: it was to be still going"
        page.reload()
        # the reloaded page's box, drawn before its (slow) run's page: up to 120 s (the 30 s default was passed by a
        # reload at load 18 on the 2 cores, the box still empty)
        assert question_shown(page, timeout_s=120) == typed


def test_a_token_of_journeys_strip_opens_its_lens_on_layers(server, browser):
    """Journey's compact commitment strip: a click on an answer token lands on Layers, on this run, with the lens's
    token picker at that token (its link's `ly.commit_token`)."""
    with shared_tab(browser, height=1600) as page:
        page.goto(f"{server}/journey?max_new_tokens=4&q=Which%20layer%20decides%20each%20word%3F")
        settle(page, timeout=300)
        page.get_by_role("button", name=re.compile("Show where each answer token was decided")).click()
        settle(page, timeout=300)
        links = page.locator("a.tpe-commit-link")
        n = links.count()
        assert 1 <= n <= 4
        links.nth(n - 1).click()
        page.wait_for_url(re.compile(r"/layers\?"), timeout=30_000)
        settle(page, timeout=300)
        assert page_shown(page) == ("/layers", "Layers")
        assert question_shown(page) == "Which layer decides each word?"
        picker = page.locator('[data-testid="stSelectbox"]').filter(has_text="logit lens at the answer token")
        chosen = picker.locator("input").input_value()
        assert chosen.startswith(f"({n - 1}) "), chosen
        assert page.locator('[data-testid="stException"]').count() == 0
