"""KV cache's two charts over the decode steps in Chromium, on Gemma (sliding and full layers): their step ticks
never overlap, whatever width the page is drawn at, and the per-layer chart names each layer's kind. A fixed count
of token ticks (32 of 64) piled into one grey smudge once the main column was narrow (900 px, the sidebar open).
Tiny models (the tiny Gemma: layers sliding, sliding, full); screenshots artifacts/browser/kv_ticks_WIDTH.png."""
import math
import os
import urllib.parse

import pytest
from kit.browser import CHROMIUM, SHOTS, fresh_page, settle, until

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

# Per chart: its drawn x tick labels, left to right, each [anchor x on screen, angle in degrees, font size, box left,
# box right]. The anchor is where the label meets its tick; a label rotated by the angle runs from there.
TICKS = """() => [...document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot')].map(plot =>
    [...plot.querySelectorAll('.xtick text')].filter(t => t.getBoundingClientRect().width > 0).map(t => {
        const m = t.getScreenCTM(); const p = t.ownerSVGElement.createSVGPoint();
        p.x = t.x.baseVal.length ? t.x.baseVal[0].value : 0; p.y = t.y.baseVal.length ? t.y.baseVal[0].value : 0;
        const a = p.matrixTransform(m); const r = t.getBoundingClientRect();
        return [a.x, Math.atan2(m.b, m.a) * 180 / Math.PI, parseFloat(getComputedStyle(t).fontSize), r.left, r.right];
    }).sort((u, v) => u[0] - v[0]))"""


def overlaps(ticks) -> int:
    """How many pairs of neighbouring labels overlap: parallel rotated labels are apart when their anchors' spacing
    across the writing direction (spacing x sin(angle)) is at least a line of text; level ones when their boxes
    do not meet."""
    count = 0
    for a, b in zip(ticks, ticks[1:]):
        if abs(a[1]) > 5:
            count += (b[0] - a[0]) * abs(math.sin(math.radians(a[1]))) < 0.9 * a[2]
        else:
            count += b[3] < a[4] - 1
    return count


@pytest.mark.parametrize("width", [900, 1400])
def test_kv_cache_step_ticks_never_overlap_on_gemma(tiny_server_folder, tiny_server, chromium, width):
    if not (tiny_server_folder / "gemma-3-270m").exists():
        pytest.skip("Gemma's tokenizer is not converted here")
    with fresh_page(chromium, width=width, height=2600) as page:  # both charts in the screenshot
        page.goto(f"{tiny_server}/kv-cache?{urllib.parse.urlencode({'model': 'gemma-3-270m', 'format': 'plain'})}")
        settle(page)
        assert page.locator('[data-testid="stException"]').count() == 0
        page.get_by_text("1. How the cache grows").wait_for(timeout=60_000)
        page.screenshot(path=str(SHOTS / f"kv_ticks_{width}.png"))
        try:  # plotly lays out a chart's ticks after its SVG exists (settle waits for the SVG): wait for the ticks
            until(page, f"() => ({TICKS})().filter(t => t.length > 3).length >= 2", timeout_s=60)
        except Exception:  # the assert below says what was drawn
            pass
        charts = [ticks for ticks in page.evaluate(TICKS) if len(ticks) > 3][:2]  # growth, then per layer
        assert len(charts) == 2, charts
        layers = page.evaluate("() => [...document.querySelectorAll('[data-testid=\"stMain\"] .ytick text')]"
                               ".map(t => t.textContent)")
        assert "layer 2 · full" in layers and "layer 0 · sliding" in layers, layers  # the tiny Gemma: S, S, F
        for ticks in charts:
            assert overlaps(ticks) == 0, f"{overlaps(ticks)} of {len(ticks)} step ticks overlap at width {width}"
