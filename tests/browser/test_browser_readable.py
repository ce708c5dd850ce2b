"""Chips in Chromium (ui/more_below.py): on Compare models, the Korean question's chips in each model's column are
drawn where a reader sees them, not clipped by a box of fixed height (SmolLM2's column once hid all of them below
its system prompt, with no cue). Tiny models; screenshot artifacts/browser/readable_compare_korean.png."""
import os
import urllib.parse

import pytest
from kit.browser import CHROMIUM, SHOTS, fresh_page, settle

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

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


def test_the_korean_question_shows_in_both_columns_of_compare(tiny_server, chromium):
    with fresh_page(chromium, height=1000) as page:
        page.goto(f"{tiny_server}/compare-models?{urllib.parse.urlencode({'q': KOREAN})}")
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
