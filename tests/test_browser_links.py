"""Issue 19 in a real browser: the phishing link from the report shows its text literally, with no live link."""
import os

import pytest
from kit.browser import CHROMIUM, CHROMIUM_ARGS, SHOTS, app_server, settle

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

PHISHING_QUERY = "seed=%5BSession%20expired%3A%20log%20in%20again%5D%28http%3A//evil.example/login%29"


def test_a_tampered_parameter_shows_its_text_not_a_link(tiny_server_cache):
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with app_server("browser-links.log", cache_dir=tiny_server_cache) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        page.goto(f"{url}/journey?{PHISHING_QUERY}")
        settle(page, timeout=300)
        page.screenshot(path=str(SHOTS / "phishing_link.png"))
        warning = page.locator('[data-testid="stAlertContentWarning"]', has_text="was not usable")
        assert warning.count() == 1
        shown = warning.inner_text().replace("\u2060", "")
        assert "[Session expired: log in again](http://evil.example/login)" in shown, shown
        assert page.locator('a[href*="evil.example"]').count() == 0
        assert page.locator('[data-testid="stException"]').count() == 0
        browser.close()


# Run from the repository's root, as the app is (tests/browser_kit.py), so it draws with this checkout's ui/.
SCRIPT = """
import streamlit as st
from ui.escape import code_span, markdown_text
for i, text in enumerate({hostile!r}):
    st.warning(f"raw {{i}}: " + text)
    st.warning(f"escaped {{i}}: " + markdown_text(text))
    st.caption(f"code {{i}}: " + code_span(text))
from views.chrome import run_marker
run_marker()  # what settle() waits for, as app.py draws it
"""


def test_streamlits_own_renderer_links_the_raw_texts_but_not_the_escaped(tmp_path):
    """The Markdown model in tests/markdown_links.py checked against the real renderer: every hostile text
    is a live link when shown raw, and none is through markdown_text or code_span."""
    import subprocess
    import sys

    from kit.browser import ROOT
    from kit.markdown_links import HOSTILE
    from playwright.sync_api import sync_playwright

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
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1200, "height": 3000})
            page.goto(f"http://localhost:{port}")
            settle(page, timeout=120)
            page.screenshot(path=str(SHOTS / "hostile_markdown.png"), full_page=True)
            boxes = page.locator('[data-testid="stAlertContentWarning"], [data-testid="stCaptionContainer"]')
            found = {}
            for n in range(boxes.count()):
                box = boxes.nth(n)
                found[box.inner_text().split(":")[0].strip()] = box.locator("a[href], img[src]").count()
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert found, "the script drew no box: it failed (its error is on the screenshot hostile_markdown.png)"
    for i in range(len(HOSTILE)):
        assert found.get(f"escaped {i}") == 0 and found.get(f"code {i}") == 0, (i, HOSTILE[i], found)
    linked_raw = [HOSTILE[i] for i in range(len(HOSTILE)) if found.get(f"raw {i}")]
    assert len(linked_raw) >= len(HOSTILE) - 2, linked_raw  # the renderer does link them (raw HTML is not drawn)
