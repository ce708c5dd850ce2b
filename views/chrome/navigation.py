"""A map and a path: the page being drawn, each page's Back and Next (in the order of PAGES,
views/chrome/page_list.py), and the architecture map (pipeline/stages/model_map.py, drawn by ui/model_map.py) with
this page's parts lit.

    back_next()          # at the end of every page (views.chrome.frame.end_page draws it for a page that ends early)
    architecture_map()   # the full map (Start, Journey), the page the user came from lit
    small_map()          # the strip under every other page's title (views.chrome.frame.page_header), its parts lit
"""
from __future__ import annotations

import inspect
import os
from pathlib import Path
from urllib.parse import urlencode

import streamlit as st

from views.chrome.page_list import PAGES, PageEntry, neighbours

ROOT = Path(__file__).resolve().parents[2]


def current_page() -> PageEntry | None:
    """The page being drawn: the page file running on the call stack (under app.py's navigation and in an AppTest
    that runs one page file alone alike)."""
    files = {str((ROOT / p.script).resolve()): p for p in PAGES}
    for frame in inspect.stack(context=0):
        page = files.get(os.path.realpath(frame.filename))
        if page is not None:
            return page
    return None


def page_href(url: str) -> str:
    """A link to the page at `url` carrying the sidebar's request (as the sidebar's own links do)."""
    from views.links.url_state import request_params

    query = urlencode(request_params())
    return f"./{url}" + (f"?{query}" if query else "")


def page_link(page: PageEntry, label: str) -> None:
    """An st.page_link carrying the request; plain text when the page is not in the navigation (AppTest runs one
    page file alone)."""
    from streamlit.errors import StreamlitAPIException, StreamlitPageNotFoundError

    from views.links.url_state import request_params

    try:
        st.page_link(page.script, label=label, icon=page.icon, query_params=request_params())
    except (StreamlitPageNotFoundError, StreamlitAPIException, KeyError):
        st.caption(f"{page.icon} {label}")


def back_next() -> None:
    """Back and Next under the page, named by the page they lead to and its section."""
    here = current_page()
    if here is None:
        return
    before, after = neighbours(here.url)
    st.divider()
    c1, c2 = st.columns(2)
    with c1:
        if before is not None:
            page_link(before, f"← Back: {before.title}")
    with c2:
        if after is not None:
            page_link(after, f"Next: {after.title} →" + (f" (new section: {after.section})"
                                                      if after.section != here.section else ""))


def architecture_map(small: bool = False, dims=None, about: str | None = None) -> None:
    """The map of the picked model (or `dims`'), each part a link to its page. Lit: the parts the page at URL path
    `about` is about (default: this page). The full map, drawn on pages about the whole request (Start, Journey),
    lights the page the user came from, or where a request starts, and says which."""
    from pipeline.stages.model_map import model_map
    from ui.model_map import map_html
    from views.server.state import get_model

    here = current_page()
    current = here.url if here else ""
    m = model_map(dims or get_model().config_dims, plain=sent_as_plain_text())
    lit, said = m.lit(about or current), None
    if not small and not lit:
        came = came_from()
        lit = m.lit(came.url) if came is not None else frozenset()
        said = f"Lit: what {came.title}, the page you came from, shows." if lit else None
        if not lit:
            lit, said = m.lit("request"), "Lit: where a request starts. Each part opens its page."
    st.html(map_html(m, current, page_href, small=small, lit=lit))
    if said:
        st.caption(said)


def sent_as_plain_text() -> bool:
    """The sidebar's request goes as plain text (no chat template); False for a request the sidebar cannot make."""
    from pipeline.core.errors import InputError
    from views.request.session import current_request

    try:
        return current_request().prompt_format == "plain"
    except InputError:
        return False


FULL_MAP_PAGES = ("start", "journey")  # they draw the whole map themselves


def small_map(about: str | None = None) -> None:
    """Under a page's title (views.chrome.frame.page_header; Presenter mode under each stage's): the small map with the
    parts lit that the page at `about` is about (a URL path or a page file such as 'views/pages/tokens.py'; default:
    this page). Not on the pages that draw the full map."""
    here = current_page()
    if here is None or here.url in FULL_MAP_PAGES:
        return
    if about is not None and about.endswith(".py"):
        about = next(p.url for p in PAGES if p.script == about)
    architecture_map(small=True, about=about)


def arrive(url: str) -> None:
    """Note the page at URL path `url` as this session's current one (app.py, every run): came_from() then names
    the page before it."""
    ss = st.session_state
    if ss.get("_page_here") != url:
        ss["_page_before"], ss["_page_here"] = ss.get("_page_here"), url


def came_from() -> PageEntry | None:
    """The page this session showed before the current one (None on the first, or in an AppTest of one page)."""
    before = st.session_state.get("_page_before")
    return next((p for p in PAGES if p.url == before), None)
