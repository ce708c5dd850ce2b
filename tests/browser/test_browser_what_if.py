"""What if in a real browser, with a Korean and a long (~600-token) question: tokens named by their
character ('토 (1–2/3)', never bare '<0xED><0x86>'), a branch made and compared per token, no exception.
Screenshots under artifacts/browser/what_if_*.png."""
import os
import re
from urllib.parse import urlencode

import pytest
from kit.browser import CHROMIUM, ROOT, SHOTS, app_server, fresh_page, open_page, settle
from kit.texts import KOREAN, LONG_QUESTION

SERVER_LOG = ROOT / "artifacts" / "browser-what-if.log"  # app_server's log of this file's server
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]


def ask(page, question: str) -> None:
    sidebar = page.locator('[data-testid="stSidebar"]')
    sidebar.locator("textarea").first.fill(question)
    sidebar.get_by_role("button", name="Run the model").click()
    settle(page)


def open_what_if(page) -> None:
    """Go to What if (nothing to do when it is showing: `ask` has waited for its run of the new question)."""
    if page.locator("h1", has_text="What if").count() == 0:
        open_page(page, "What if")
        settle(page)


def step_slider(page, name: str):
    """The What-if page's step slider: drawn by every completed run of the page (settle() has waited for one);
    when it is missing, what the page showed and the server's log are kept (artifacts/browser/what_if_<name>_*)."""
    slider = page.locator('[data-testid="stMain"] [data-testid="stSlider"]', has_text="step of the answer")
    slider = slider.locator('input[type="range"]').first
    if slider.count() == 0:
        stem = SHOTS / f"what_if_{name}_no_slider"
        page.screenshot(path=str(stem.with_suffix(".png")), full_page=True)
        shown = page.locator('[data-testid="stMain"]').inner_text()
        log = SERVER_LOG.read_text(errors="replace")[-3000:]
        stem.with_suffix(".txt").write_text(f"{page.url}\n\n{shown}\n\n--- the server's log ended ---\n{log}")
        pytest.fail(f"{name}: no step slider after the What-if page's run; it showed {shown[:500]!r} "
                    f"(kept in {stem}.*)")
    return slider


def branch_at(page, step: int, name: str) -> str:
    """Move the step slider to `step`, continue with the first other candidate; returns the 'answer so far' box.
    One key at a time: each move reruns the page once, and settle() waits for that run."""
    main = page.locator('[data-testid="stMain"]')
    slider = step_slider(page, name)
    if slider.get_attribute("aria-valuetext") != "0":  # the slider keeps its place across requests
        slider.focus()
        page.keyboard.press("Home")
        settle(page)
    for n in range(1, step + 1):
        step_slider(page, name).focus()
        page.keyboard.press("ArrowRight")
        settle(page)
        assert step_slider(page, name).get_attribute("aria-valuetext") == str(n)
    so_far = main.locator('[data-testid="stCode"]').first.inner_text()
    main.get_by_role("button", name="Continue from here with this token").click()
    settle(page)  # its run ends in st.rerun(): the run after it, which draws the comparison, is waited for
    return so_far


def chart_drawn(main) -> bool:
    """One plotly chart drawn (the branch's log-probabilities), and no part of the page that failed to load."""
    return "Failed to fetch" not in main.inner_text() and main.locator(".js-plotly-plot").count() == 1


def test_what_if_with_a_korean_and_a_long_question(chromium):
    with app_server("browser-what-if.log") as url, fresh_page(chromium, 1400, 2400) as page:
        failed = []  # what the browser could not fetch (once, a chart's code: every chart on the page said so)
        page.on("requestfailed", lambda r: failed.append(f"{r.url} ({r.failure})"))
        page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.url} (HTTP {r.status})"))
        page.on("console", lambda m: m.type == "error" and failed.append(f"console: {m.text[:300]}"))
        for name, question, step in (("korean", KOREAN, 5), ("long", LONG_QUESTION, 2)):
            try:
                if name == "korean":  # by a link, straight to What if: no page before it drawn
                    page.goto(f"{url}/what-if?{urlencode({'q': question})}")
                    settle(page)
                else:  # typed in the sidebar of What if
                    ask(page, question)
                open_what_if(page)
                so_far = branch_at(page, step, name)
            except Exception:
                page.screenshot(path=str(SHOTS / f"what_if_{name}_failed.png"), full_page=True)
                sliders = page.locator('[data-testid="stSidebar"] [data-testid="stSliderThumbValue"]')  # once seen
                print(f"{name}: the sidebar's sliders showed", sliders.all_inner_texts())  # all at their minimum
                print(f"{name}: the page showed", page.locator('[data-testid="stMain"]').inner_text()[:3000])
                print(f"{name}: the server's log ended", SERVER_LOG.read_text(errors="replace")[-3000:])
                raise
            main = page.locator('[data-testid="stMain"]')
            assert len(main.get_by_text(re.compile(rf"from step {step} on: .* per token")).all()) == 2, \
                f"{name}: the two paths are not compared per token from the branch point"
            assert main.get_by_text("A total is not compared").count() == 1
            assert page.locator('[data-testid="stException"]').count() == 0, f"{name}: the page raised"
            assert not re.search(r"(<0x[0-9A-F]{2}>){2}", so_far), f"{name}: bare bytes in {so_far!r}"
            if name == "korean":
                assert "토 (1–2/3)" in so_far, so_far
            main.locator(".js-plotly-plot").first.wait_for(timeout=60_000)  # charts load their code lazily
            assert chart_drawn(main), f"{name}: the branch's chart did not load: {failed}"
            page.screenshot(path=str(SHOTS / f"what_if_{name}.png"), full_page=True)
