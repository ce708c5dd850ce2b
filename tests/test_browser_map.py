"""The architecture map in a real browser: on Start it is drawn with one cell per block, and a click on a part opens
that part's page with the request kept (its link carries the sidebar's request); the stage page opened draws the
small map with that part lit, and ends with Back and Next."""
import os

import pytest
from kit.browser import CHROMIUM, SHOTS, question_shown, server_and_page, settle

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]


def test_a_part_of_the_map_opens_its_page_with_the_request(tiny_server_cache, tiny_app_model):
    from views.page_path import neighbours

    L = tiny_app_model[1].dims.L
    with server_and_page("browser-map.log", tiny_server_cache, height=1200) as (url, page):
        page.goto(f"{url}/?max_new_tokens=3&q=Is%20a%20pepper%20a%20fruit%3F")
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
