"""Prompt caching's block boxes (ui/cache_blocks.py) drawn in Chromium: every box shows its status and its tokens
inside it. "#15 not cacheable" wrapped onto two lines in a 92 px box and pushed the tokens' line out of sight
(found in the walk of Prompt caching on a 600-token question). No app server: the HTML alone, in the page's font
size and line height (16 px, 1.6)."""
import os

import pytest
from kit.browser import CHROMIUM, CHROMIUM_ARGS, watch

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

# Per box: [its height, the bottom of its last line below its top, its width, the status line's width].
BOXES = """() => [...document.querySelectorAll('body > div > div')].map(b => { const r = b.getBoundingClientRect();
    const lines = b.querySelectorAll(':scope > div'); const last = lines[lines.length - 1].getBoundingClientRect();
    return [r.height, last.bottom - r.top, r.width, lines[0].scrollWidth]; })"""


def test_every_block_box_shows_its_status_and_its_tokens():
    from playwright.sync_api import sync_playwright

    from pipeline.prompt_cache.outcomes import HIT, NOT_CACHEABLE
    from ui.cache_blocks import block_row_html

    tokens = ["<|im_start|>", "system", "\n", "You are Tilly"] * 4 + ["<b>&amp;</b>"] * 3
    row = {"tokens": tokens, "stats": {"block_size": 16, "block_status": [HIT, NOT_CACHEABLE],
                                       "divergence": {"kind": "changed", "token_index": 16}}}
    html = block_row_html(row)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = watch(browser.new_page(viewport={"width": 900, "height": 400}))
        page.set_content(f"<html><body style='font-family:sans-serif;font-size:16px;line-height:1.6'>{html}"
                         "</body></html>")
        boxes = page.evaluate(BOXES)
        browser.close()
    assert len(boxes) == 2, boxes
    for height, last_bottom, width, status_width in boxes:
        assert last_bottom <= height, boxes  # the tokens' line inside the box, not pushed below its edge
        assert status_width <= width, boxes  # the status line whole
    assert boxes[0][2] < boxes[1][2] and boxes[0][2] <= 92 + 12  # a short status: the small box; tokens never widen
