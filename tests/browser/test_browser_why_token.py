"""Why this token in Chromium: a node of the contribution graph is picked by clicking it (before, only the dropdown
under the graph picked one). Tiny model; screenshot artifacts/browser/why_token_node_click.png."""
import os

import pytest
from kit.browser import CHROMIUM, SHOTS, fresh_page, settle, until

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

# The graph's node markers as plotly drew them: per trace named "... (click to pick)", each point's hover text and
# where it is on the screen (plotly's own axis mapping, from the plot's drawn area).
MARKERS = """() => { const gd = document.querySelector('.st-key-why_graph .js-plotly-plot');
    if (!gd || !gd._fullLayout) return [];
    const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
    const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
    return gd.data.filter(t => (t.name || '').includes('click to pick')).flatMap(t => t.x.map((x, i) => ({
        trace: t.name, text: t.text[i], node: t.customdata[i],
        x: box.left + xa.l2p(x), y: box.top + ya.l2p(t.y[i]) }))); }"""


def node_pick(page) -> str:
    """The node dropdown's shown value."""
    box = page.locator('[data-testid="stSelectbox"]', has_text="a node of the graph").first
    return box.locator("input").first.input_value()


def test_clicking_a_node_of_the_graph_picks_it(tiny_server, chromium):
    with fresh_page(chromium, height=1400) as page:
        page.goto(f"{tiny_server}/why-token")
        settle(page)
        assert page.locator('[data-testid="stException"]').count() == 0
        graph = page.locator(".st-key-why_graph")
        graph.scroll_into_view_if_needed()
        threshold = page.locator('[data-testid="stSlider"]', has_text="threshold").locator('input[type="range"]').first
        threshold.focus()
        page.keyboard.press("Home")  # the lowest threshold, 0.01: the tiny model's graph then has several nodes
        settle(page)
        try:  # plotly draws the chart after its SVG exists (settle waits for the SVG)
            until(page, f"() => ({MARKERS})().length > 1", timeout_s=60)
        except Exception:  # the assert below says what was drawn
            pass
        markers = page.evaluate(MARKERS)
        drawn = page.evaluate("() => [...document.querySelectorAll('.js-plotly-plot')].map(p => [p.closest("
                              "'[class*=st-key-]')?.className, (p.data || []).map(t => t.name)])")
        assert len(markers) > 1, drawn
        page.screenshot(path=str(SHOTS / "why_token_graph.png"))
        before = node_pick(page)
        # a node other than the one picked now (the strongest, first in the dropdown), not a head the dropdown shows
        target = next(m for m in reversed(markers) if m["node"] != 0 and m["trace"].startswith(("MLP", "head")))
        name = target["text"].split(":")[0] if target["trace"].startswith("head") else target["text"].split(" at ")[0]
        assert name not in before
        page.mouse.click(target["x"], target["y"])
        settle(page)
        page.screenshot(path=str(SHOTS / "why_token_node_click.png"))
        assert page.locator('[data-testid="stException"]').count() == 0
        after = node_pick(page)
        assert after.startswith(name + " ·"), (name, after, before)
