"""'My session' in a real browser: a learner writes a note on a view, visits another, downloads the summary, and the
file opens with the network blocked: 0 requests leave the machine, every chart drawn, the views in order with the
note (Debian's chromium through Playwright, the module's shared tiny-model server)."""
import os
import re
from pathlib import Path

import pytest
from kit.browser import (CHROMIUM, SHOTS, give_back, open_expander, open_offline, open_page, settle, tab,
                         warm_context)

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

NOTE = "Tokens are pieces <i>not</i> words"


def open_my_session(page) -> None:
    """Open the sidebar's expander (unless a rerun kept it open) until its note box shows."""
    open_expander(page, "My notes and session")
    page.get_by_role("button", name="Save the note").wait_for(state="visible", timeout=30_000)


def test_the_session_summary_downloads_and_opens_offline(tiny_server, chromium, tmp_path):
    context = warm_context(chromium, 1400, 1200)
    page = tab(context)
    page.goto(f"{tiny_server}/tokens?max_new_tokens=2")
    settle(page)
    open_my_session(page)
    page.locator('[data-testid="stSidebar"] textarea[aria-label^="Your note on this view"]').fill(NOTE)
    page.get_by_role("button", name="Save the note").click()
    settle(page)
    open_page(page, "Request & template")
    settle(page)
    open_my_session(page)
    page.get_by_role("button", name=re.compile("Make my session summary")).click()
    settle(page)
    button = page.get_by_role("button", name="Download my session")
    button.wait_for(state="visible", timeout=60_000)
    with page.expect_download(timeout=120_000) as info:
        button.click()
    path = tmp_path / "my-session.html"
    info.value.save_as(path)
    give_back(context)

    summary, asked = open_offline(chromium, path, min_plots=2)
    titles = summary.locator(".visit h3").all_inner_texts()
    assert [re.sub(r"^\d+\. ", "", t) for t in titles] == ["Tokens", "Request & template"]
    assert summary.locator(".note-text").first.inner_text() == NOTE  # shown as text, not markup
    assert summary.locator(".visit h3 a").first.get_attribute("href").startswith(f"{tiny_server}/tokens?")
    assert summary.locator(".js-plotly-plot .main-svg").count() >= 2  # drawn by the embedded plotly.js
    assert asked == []
    summary.screenshot(path=str(SHOTS / "my_session_offline.png"), full_page=True)
    summary.context.close()
    assert Path(path).stat().st_size > 0
