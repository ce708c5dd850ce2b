"""Fixtures of the browser tests (a pytest plugin): one app server on the tiny models for the browser files of a test
process, one Chromium for all of them (each module connected to it), each test in a context of its own
(kit.browser.warm_context, fresh_page).

A server's start and its first run (model load, the default request's warm-up) took 12-20 s of each browser test
that started its own; the tests that use `tiny_server` now pay it once a test process (under xdist, once a worker).
What a test leaves in a browser (its session, cookies, the address it opened) goes with its page's context; the server
keeps only what it keeps for any two visitors (the runs it computed, the rooms made), in a cache folder of its own
(app_fixtures' `tiny_server_folder`). A file whose tests need a server in a state of their own (a store's bound, a
slowed script, the API) starts its own."""

import pytest

from kit.browser import SHOTS, app_server, chromium_process, disconnect


@pytest.fixture(scope="session")
def tiny_server(tiny_server_folder):
    """The URL of an app server on the tiny models (kit.browser.app_server) shared by the browser files of this test
    process; its log is artifacts/tiny-server-PROCESS.log (PROCESS: the xdist worker, or main)."""
    import os

    with app_server(f"tiny-server-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.log",
                    cache_dir=tiny_server_folder) as url:
        yield url


@pytest.fixture(scope="session")
def chromium_endpoint(tmp_path_factory):
    """One Chromium for the browser tests of this test process (kit.browser.chromium_process): endpoint() gives the
    address each module's `chromium` connects to."""
    with chromium_process(tmp_path_factory.mktemp("chromium-profile")) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def chromium(chromium_endpoint):
    """The test process's Chromium through Playwright, connected for the module's tests (each takes a context:
    kit.browser.warm_context or fresh_page). A test that needs a browser uses this one: Playwright's sync API cannot
    run twice at once in a process, and a module's connection ends with the module (so no later test finds its event
    loop running). The contexts the module made close with it; the default context and its warm tab stay."""
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.connect_over_cdp(chromium_endpoint())
        yield browser
        disconnect(browser)
