"""A failed test's report says what the pages and the servers saw (a pytest plugin): each watched page's
address, socket opens and closes and console errors (kit.browser.watch), and the tail of each app server's log,
those open now and those the test closed. A failure seen only in CI can then be told apart: a socket that dropped,
a server error, or a page that simply did not do what was asked."""
import time

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    from kit.browser import forget_ended_before

    forget_ended_before(time.monotonic())
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:  # any test: the room's tests drive Chromium and servers outside the browser tier too
        from kit.browser import failure_context

        try:
            text = failure_context()
        except Exception as e:  # the report must not hide the test's own failure
            text = f"(the pages and servers could not be read: {e!r})"
        if text:
            report.sections.append(("browser: pages and servers", text))
