"""Issue 19 in a real browser: the phishing link from the report shows its text literally, with no live link."""
import os

import pytest

from browser_kit import CHROMIUM, CHROMIUM_ARGS, SHOTS, app_server, settle

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

PHISHING_QUERY = "seed=%5BSession%20expired%3A%20log%20in%20again%5D%28http%3A//evil.example/login%29"


def test_a_tampered_parameter_shows_its_text_not_a_link():
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with app_server("browser-links.log") as url, sync_playwright() as p:
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
