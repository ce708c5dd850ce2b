"""Tables drawn whole in a laptop's window (a walk found them cut): in Chromium at 1280 × 900 with the sidebar open, no
table on Prefill & decode (the roofline's, the ceilings measured) or on Compare models is wider than its box (the
grid's scroller holds nothing past its right edge); and the server's log holds none of torchao's or torch's import
lines. Tiny models; screenshots artifacts/browser/tables_*.png."""
import os
import re
from pathlib import Path

import pytest
from kit.browser import CHROMIUM, SHOTS, app_server, fresh_page, settle
from kit.paths import ROOT as ROOT_STR

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

# Each drawn table in the page's order: [its number, the px its grid holds past the right edge of its box] (-1: no
# grid found). Before the split, Prefill & decode's roofline table held 158 px past the edge here.
CUT_PX = """() => [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stDataFrame"]')].map((t, i) => {
    const s = t.querySelector('.dvn-scroller');
    return [i, s ? s.scrollWidth - s.clientWidth : -1]; })"""
LOG = "browser-tables.log"


def test_tables_fit_a_laptop_window_and_the_log_is_quiet(tiny_server_cache, chromium):
    with app_server(LOG, cache_dir=tiny_server_cache) as url, fresh_page(chromium, 1280, 900) as page:
        page.goto(f"{url}/prefill-decode")
        settle(page)
        page.get_by_role("button", name=re.compile("Measure the ceilings")).click()
        settle(page)
        main = page.locator('[data-testid="stMain"]')
        page.locator('[data-testid="stMetric"]').first.wait_for(timeout=120_000)  # the ceilings, measured
        page.screenshot(path=str(SHOTS / "tables_prefill_decode.png"), full_page=True)
        cut = page.evaluate(CUT_PX)
        assert len(cut) >= 3 and all(px >= 0 for _, px in cut), cut  # the ceilings' table, the verdicts, the numbers
        assert not [c for c in cut if c[1] > 1], cut

        page.goto(f"{url}/compare-models")
        settle(page)
        main.get_by_text("5. Time to first token and per token").wait_for(timeout=300_000)  # the comparison, done
        page.screenshot(path=str(SHOTS / "tables_compare_models.png"), full_page=True)
        cut = page.evaluate(CUT_PX)
        assert len(cut) >= 4 and all(px >= 0 for _, px in cut), cut  # two candidates' tables, shape, timing
        assert not [c for c in cut if c[1] > 1], cut
    log = (Path(ROOT_STR) / "artifacts" / LOG).read_text(encoding="utf-8")
    assert "Failed to load" not in log and "Enum subclass" not in log, log[-2000:]
