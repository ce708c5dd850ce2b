"""A real browser on the app whose server is killed: Streamlit's "Connection error" dialog says the server is
restarting, not "Are you connected to the internet?" (ui/connection_notice.py). The page is opened at
127.0.0.1, an address that is not "localhost": Streamlit's text for it is the internet one, the one a
room's learners saw. The server runs the tiny model (conftest's `tiny_server_cache`)."""
import os
import signal
import subprocess

import pytest
from kit.browser import CHROMIUM, CHROMIUM_ARGS, SHOTS, app_server, settle, until, watch

from ui.connection_notice import NOTE

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

DIALOG = '[data-testid="stDialog"]'


def listening_pid(port: int) -> int:
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    return int(out.split("pid=", 1)[1].split(",", 1)[0])


def test_a_killed_server_is_said_to_be_restarting_not_the_internet(tiny_server_cache):
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with app_server("browser-connection.log", host="127.0.0.1", cache_dir=tiny_server_cache) as url:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = watch(browser.new_page(viewport={"width": 1400, "height": 900}))
                page.goto(url)
                settle(page, timeout=300)
                # the watcher runs in the page: its script is started by the page's run, not necessarily before the
                # run's end mark shows, so wait for the watcher itself
                until(page, "() => window.__tpeConnectionNotice === true", timeout_s=60)
                os.kill(listening_pid(int(url.rsplit(":", 1)[1])), signal.SIGKILL)
                page.wait_for_selector(DIALOG, timeout=120_000)  # Streamlit shows it from its sixth failed ping
                until(page, "note => document.querySelector('[data-testid=\"stDialog\"]')"
                      ".innerText.includes(note)", arg=NOTE, timeout_s=10)
                page.screenshot(path=str(SHOTS / "connection-error.png"))
                said = page.locator(DIALOG).inner_text()
                assert "Connection error" in said and NOTE in said
                assert "internet" not in said and "Streamlit" not in said, said
            finally:
                browser.close()



def test_a_server_killed_during_a_pages_first_run_is_said_to_be_restarting(tiny_server_cache, tmp_path):
    """The dialog's rewrite (and the text boxes' guard) is in the page before the page's own content, so
    a server that dies while the first run is still going leaves a page that says so, not "are you connected?".
    The page is slowed (kit.slow_app): its first run is still going when the server is killed."""
    from kit.browser import run_mark
    from kit.slow_app import slowed_app_server
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with slowed_app_server(tmp_path, "browser-connection-slow.log", tiny_server_cache) as (url, server):
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = watch(browser.new_page(viewport={"width": 1400, "height": 900}))
                page.goto(url)
                page.wait_for_selector("h1", timeout=300_000)  # the page has begun: its title is drawn
                # the scripts run once their elements are drawn (Streamlit fetches st.html's code on first use):
                # in place during the first run, not only after it (before the fix: after, so this wait failed)
                until(page, "() => window.__tpeConnectionNotice === true && "
                      "window.__tpeTextGuard === true", timeout_s=60)
                assert run_mark(page) == "", "the first run ended: it was to be still going"
                os.kill(server.pid, signal.SIGKILL)
                until(page, "() => { const d = document.querySelector('[data-testid=\"stDialog\"]');"
                      " return d && /restarting|internet|Streamlit still running/"
                      ".test(d.innerText); }", timeout_s=120)  # from its sixth failed ping
                page.screenshot(path=str(SHOTS / "connection-error-first-run.png"))
                said = page.locator(DIALOG).inner_text()
                assert "Connection error" in said and NOTE in said, said
                assert "internet" not in said and "Streamlit" not in said, said
            finally:
                browser.close()
