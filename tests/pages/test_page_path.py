"""A map and a path: Start lists every page of app.py's PAGES in order, in sections; every page ends with Back and
Next (the pages on either side in PAGES); the architecture map is drawn from the model's own dimensions, each part a
link to a real page, the current page's parts highlighted, on Start and Journey and small under stage pages' titles.

Fast tier: pages on conftest's tiny models; the map's dims from the real models' config.json (files only).
"""
import os
import re

import pytest
from kit.apptest import page_app
from kit.paths import ROOT, app_pages
from streamlit.testing.v1 import AppTest

from pipeline.model.dims import ModelDims
from pipeline.stages.model_map import model_map
from ui.model_map import map_html
from views.chrome.page_list import PAGES as ENTRIES
from views.chrome.page_list import neighbours, sections

PAGES = app_pages()
SECTIONS = ["The request", "Inside the model", "Choosing the token", "The loop and its cache",
            "What the machine pays", "Caching across requests", "Tools for a room"]


def smollm2_dims() -> ModelDims:  # SmolLM2-135M's config.json values (huggingface.co/HuggingFaceTB)
    from types import SimpleNamespace
    return ModelDims.from_config(SimpleNamespace(
        num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576, intermediate_size=1536,
        vocab_size=49152, max_position_embeddings=8192, rope_theta=100000.0, model_type="llama"),
        "SmolLM2-135M-Instruct", "float32", "cpu")


def gemma_dims() -> ModelDims:  # Gemma-3-270M's config.json values (huggingface.co/google/gemma-3-270m)
    from types import SimpleNamespace
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(18)]
    return ModelDims.from_config(SimpleNamespace(
        num_hidden_layers=18, num_attention_heads=4, num_key_value_heads=1, head_dim=256, hidden_size=640,
        intermediate_size=2048, vocab_size=262144, max_position_embeddings=32768, layer_types=types,
        sliding_window=512, rope_parameters={"full_attention": {"rope_theta": 1_000_000.0},
                                             "sliding_attention": {"rope_theta": 10_000.0}},
        model_type="gemma3_text"), "Gemma-3-270M", "float32", "cpu")


def test_the_sections_hold_every_page_in_the_order_a_request_travels():
    assert [p.name for p in ENTRIES] == PAGES
    assert [name for name, _ in sections()] == SECTIONS
    assert [p.url for _, entries in sections() for p in entries] == [p.url for p in ENTRIES]


def texts(at) -> list[str]:
    return [str(e.value) for kind in ("markdown", "caption") for e in getattr(at, kind)]


def test_start_lists_every_page_in_order_one_line_each(tiny_app):
    """Run alone (AppTest), Start's links are drawn as captions (no other page is in the navigation)."""
    at = page_app("start")
    at.run()
    assert not at.exception, at.exception
    shown = texts(at)
    lines = [next((n for n, t in enumerate(shown) if t.startswith(f"{p.icon} {p.title}: ")), None) for p in ENTRIES]
    assert None not in lines, [p.title for p, n in zip(ENTRIES, lines) if n is None]
    assert lines == sorted(lines)  # in PAGES' order
    headings = [shown.index(f"**{name}**") for name in SECTIONS]
    assert headings == sorted(headings)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_ends_with_back_and_next(tiny_app, page):
    """Run alone (AppTest), a page's links to pages outside it are drawn as captions: the last ones are Back and
    Next, naming the pages on either side in PAGES."""
    at = page_app(page, req_max_new_tokens=3)
    at.run()
    assert not at.exception, at.exception
    before, after = neighbours(next(p.url for p in ENTRIES if p.name == page))
    ends = [c.value for c in at.caption][-2:]
    want = ([f"← Back: {before.title}"] if before else []) + ([f"Next: {after.title}"] if after else [])
    assert before or after
    for text, link in zip(ends[-len(want):], want):
        assert text.split(" ", 1)[1].startswith(link), (ends, want)


def test_back_and_next_are_links_that_carry_the_request(tiny_app):
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.query_params = {"max_new_tokens": "3"}
    at.run()
    at.switch_page("views/pages/embeddings.py").run()
    assert not at.exception, at.exception
    links = [e.proto for e in at.main.get("page_link")]
    labels = {link.label: link for link in links}
    assert "← Back: Tensors & batch" in labels and "Next: Position (RoPE) →" in labels
    assert "max_new_tokens=3" in labels["Next: Position (RoPE) →"].query_string


@pytest.mark.parametrize("dims, blocks, heads", [
    (smollm2_dims(), "F" * 30, (9, 3)),
    (gemma_dims(), "sssssF" * 3, (4, 1)),
])
def test_the_map_follows_the_models_dims(dims, blocks, heads):
    m = model_map(dims)
    assert "".join("F" if b.kind == "full" else "s" for b in m.blocks) == blocks
    attention = next(p for p in m.block_parts if p.key == "attention")
    assert attention.detail.startswith(f"{heads[0]} query heads, {heads[1]} KV head")
    norms = [p for p in m.block_parts if p.key.startswith("norm.")]
    assert len(norms) == (4 if dims.architecture == "gemma3_text" else 2)  # Gemma norms each sub-layer's output too
    assert [p.key for p in m.before] == ["request", "tokens", "embeddings", "position"]
    assert [p.key for p in m.after] == ["final_norm", "lm_head", "sampler", "loop", "kv_cache"]
    assert f"{dims.V:,}" in next(p for p in m.after if p.key == "lm_head").detail
    if dims.architecture == "gemma3_text":
        assert "1,000,000" in m.blocks[5].detail and "512" in m.blocks[4].detail and "10,000" in m.blocks[4].detail


@pytest.mark.parametrize("dims", [smollm2_dims(), gemma_dims()])
def test_the_maps_links_resolve_to_real_pages_and_light_the_current_one(dims):
    urls = {p.url for p in ENTRIES}
    m = model_map(dims)
    assert m.pages() <= urls
    html = map_html(m, "attention", lambda page: f"./{page}?model=x&q=<b>")
    hrefs = re.findall(r"href='([^']*)'", html)
    assert len(hrefs) == len(m.parts()) + len(m.blocks)
    assert {h.split("?")[0][2:] for h in hrefs} <= urls
    assert "<b>" not in html and "q=&lt;b&gt;" in html  # escaped
    lit = re.findall(r"data-page='([^']*)'[^>]*aria-current='page'", html)
    assert lit == ["attention"]


@pytest.mark.parametrize("page, size", [("start", "full"), ("journey", "full"), ("attention", "small"),
                                        ("tokens", "small")])
def test_the_map_is_on_start_journey_and_small_on_stage_pages(tiny_app, page, size):
    at = page_app(page, req_max_new_tokens=3)
    at.run()
    assert not at.exception, at.exception
    maps = [h.proto.body for h in at.get("html") if "tpe-map" in h.proto.body]
    assert len(maps) == 1 and f"data-size='{size}'" in maps[0]
    url = next(p.url for p in ENTRIES if p.name == page)
    assert ("aria-current='page'" in maps[0]) == (url not in ("start", "journey"))


def test_starts_list_of_pages_is_links_that_carry_the_request(tiny_app):
    """In the app, each line of Start's list is a link to its page (it was a caption: the links named
    views/<file> instead of views/pages/<file>, and the page not found fell back to text)."""
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.query_params = {"max_new_tokens": "3"}
    at.run()
    assert not at.exception, at.exception
    links = {link.proto.label: link.proto for link in at.main.get("page_link")}
    for p in ENTRIES:
        label = next((label for label in links if label.startswith(f"{p.title}: ") or label == p.title), None)
        assert label is not None, (p.title, sorted(links))
        assert links[label].page == p.url or (p.url == "start" and links[label].page == ""), links[label].page
        assert "max_new_tokens=3" in links[label].query_string


def lit_parts(html: str) -> set[str]:
    """The keys of a map's lit parts ('blocks' where its block cells are lit)."""
    keys = set(re.findall(r"data-part='([^']*)'[^>]*data-lit='1'", html))
    return keys | ({"blocks"} if re.search(r"class='tpe-map-block'[^>]*data-lit='1'", html) else set())


# What each page that no part of the map opens is about, written out here (pipeline/stages/model_map.py's ABOUT
# holds the app's own copy)
ABOUT = {
    "tensors": {"tokens", "embeddings"},
    "why_token": {"attention", "mlp", "lm_head"},
    "what_if": {"sampler", "loop"},
    "constrained": {"sampler"},
    "prefill_decode": {"blocks", "loop"},
    "how_it_learned": {"lm_head", "blocks"},
    "faster_decode": {"blocks", "loop"},
    "prompt_caching": {"kv_cache"},
    "cache_audit": {"kv_cache"},
    "traffic": {"kv_cache"},
    "compare_models": {"tokens", "blocks", "kv_cache"},
    "presenter": {"request"},  # its first stage, the request: each stage lights its full page's parts
}


@pytest.mark.parametrize("page", [p for p in PAGES if p not in ("start", "journey")])
def test_every_other_page_draws_the_small_map_with_its_own_stage_lit(tiny_app, page):
    """The small map was on 9 pages only (those a part of the map opens). Every page but Start and Journey
    (they draw the full map) draws it once under its title, lit: the parts that open the page (marked as the
    current page), or the parts the page is about."""
    at = page_app(page, req_max_new_tokens=3)
    at.run()
    assert not at.exception, at.exception
    maps = [h.proto.body for h in at.get("html") if "tpe-map" in h.proto.body]
    assert len(maps) == 1 and "data-size='small'" in maps[0], (page, len(maps))
    url = next(p.url for p in ENTRIES if p.name == page)
    current = set(re.findall(r"data-part='([^']*)'[^>]*aria-current='page'", maps[0]))
    want = ABOUT.get(page) or current | ({"blocks"} if url == "layers" else set())  # the blocks open Layers too
    assert want and lit_parts(maps[0]) == want, (page, lit_parts(maps[0]), want)


def test_the_full_map_lights_the_page_the_user_came_from(tiny_app):
    """The full map on Start and Journey lit nothing. It lights where a request starts on a first visit,
    and the parts of the page the user came from after one, saying which."""
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.query_params = {"max_new_tokens": "3"}
    at.run()
    assert not at.exception, at.exception

    def full_map() -> tuple[set[str], str]:
        body = next(h.proto.body for h in at.get("html") if "data-size='full'" in h.proto.body)
        said = next(c.value for c in at.caption if c.value.startswith("Lit: "))
        return lit_parts(body), said

    assert full_map() == ({"request"}, "Lit: where a request starts. Each part opens its page.")
    for page, lit in (("why_token", {"attention", "mlp", "lm_head"}), ("tokens", {"tokens"})):
        at.switch_page(next(p.script for p in ENTRIES if p.name == page)).run()
        at.switch_page("views/pages/start.py").run()
        assert not at.exception, at.exception
        title = next(p.title for p in ENTRIES if p.name == page)
        assert full_map() == (lit, f"Lit: what {title}, the page you came from, shows."), page
