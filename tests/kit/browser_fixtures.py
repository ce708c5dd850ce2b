"""Fixtures of the browser tests (a pytest plugin): one app server on the tiny models and one Chromium for all the
tests of a module, each test on a fresh page of its own (kit.browser.fresh_page).

A server's start and its first run (model load, the default request's warm-up) took 12-20 s of each browser test
that started its own; the tests of a module now pay it once. What a test leaves in a browser (its session, cookies,
the address it opened) goes with its page's context; the server keeps only what it keeps for any two visitors (the
runs it computed, the rooms made), in a cache folder of the module's own (app_fixtures' `tiny_server_cache`)."""
from pathlib import Path

import pytest

from kit.browser import CHROMIUM, CHROMIUM_ARGS, SHOTS, app_server


@pytest.fixture(scope="module")
def tiny_server(request, tiny_server_cache):
    """The URL of an app server on the tiny models (kit.browser.app_server) shared by the module's tests; its log is
    artifacts/TEST_FILE.log."""
    with app_server(f"{Path(request.module.__file__).stem}.log", cache_dir=tiny_server_cache) as url:
        yield url


@pytest.fixture(scope="module")
def chromium():
    """Debian's Chromium through Playwright, launched once for the module's tests (each opens its own context:
    kit.browser.fresh_page). A test that needs a browser uses this one: Playwright's sync API cannot run twice at once
    in a process."""
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
