"""The architecture map in a real browser: on Start it is drawn with one cell per block, and a click on a part opens
that part's page with the request kept (its link carries the sidebar's request); the stage page opened draws the
small map with that part lit, and ends with Back and Next."""
import os

import pytest
from kit.browser import CHROMIUM, SHOTS, fresh_page, question_shown, settle

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]


def test_a_part_of_the_map_opens_its_page_with_the_request(tiny_server, chromium, tiny_app_model):
    from views.chrome.navigation import neighbours

    L = tiny_app_model[1].dims.L
    with fresh_page(chromium, height=1200) as page:
        page.goto(f"{tiny_server}/?max_new_tokens=3&q=Is%20a%20pepper%20a%20fruit%3F")
        settle(page, timeout=300)
        page.screenshot(path=str(SHOTS / "map_start.png"))
        assert page.locator(".tpe-map[data-size='full'] .tpe-map-block").count() == L
        page.click(".tpe-map a.tpe-map-part[data-page='attention']")
        settle(page, timeout=300)
        assert page.url.split("?")[0].endswith("/attention")
        assert question_shown(page) == "Is a pepper a fruit?"  # the request came along
        assert page.locator("h1").first.inner_text().startswith("Attention")
        lit = page.locator(".tpe-map[data-size='small'] [aria-current='page']")
        assert lit.count() == 1 and lit.get_attribute("data-page") == "attention"
        before, after = neighbours("attention")
        links = page.locator('[data-testid="stPageLink"]').all_inner_texts()
        assert any(f"Back: {before.title}" in t for t in links) and any(f"Next: {after.title}" in t for t in links)
        page.screenshot(path=str(SHOTS / "map_attention.png"))


LIT = ("m => [...document.querySelectorAll(`.tpe-map[data-size='${m}'] [data-lit='1']`)]"
       ".map(e => e.dataset.part || 'blocks').filter((k, i, all) => all.indexOf(k) === i).sort()")


def test_starts_list_opens_its_pages_and_the_full_map_lights_the_page_left(tiny_server, chromium):
    """A line of Start's list is a link (it was text) that opens its page with the request kept; that page
    draws the small map with its parts lit (Tensors & batch: no part of the map opens it); back on Start, the full
    map lights the page the user came from, and says so (on the first visit: where a request starts)."""
    from kit.browser import SIDEBAR_LINK

    with fresh_page(chromium, height=1200) as page:
        page.goto(f"{tiny_server}/?max_new_tokens=3&q=Is%20a%20pepper%20a%20fruit%3F")
        settle(page, timeout=300)
        assert page.evaluate(LIT, "full") == ["request"]
        page.locator('[data-testid="stMain"] a[data-testid="stPageLink-NavLink"]', has_text="Tensors & batch: ").click()
        settle(page, timeout=300)
        assert page.url.split("?")[0].endswith("/tensors")
        assert page.locator("h1").first.inner_text().startswith("Tensors & batch")
        assert question_shown(page) == "Is a pepper a fruit?"
        assert page.evaluate(LIT, "small") == ["embeddings", "tokens"]
        page.locator(SIDEBAR_LINK, has_text="Start").first.click()  # its title is the app's name
        settle(page, timeout=300)
        assert page.locator("h1").first.inner_text() == "Token Pipeline Explorer"
        page.screenshot(path=str(SHOTS / "map_start_came_from.png"))
        assert page.evaluate(LIT, "full") == ["embeddings", "tokens"]
        assert page.get_by_text("Lit: what Tensors & batch, the page you came from, shows.").count() == 1
