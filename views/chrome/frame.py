"""What every page draws around its content: the title and intro (with the small architecture map, but on Start and
Journey, which draw the full one), links to other stages' pages, an early end (end_page, with the page's Back and
Next), and the end-of-run mark browser tests wait for (run_marker, fragment)."""
from __future__ import annotations

from typing import NoReturn

import streamlit as st


def page_header(title: str, intro: str) -> None:
    st.title(title)
    st.caption(intro)
    from views.server.state import picked_weights

    weights = picked_weights()
    if weights != "fp32":  # what every number below was computed in
        from pipeline.model.weight_formats import FORMAT_NOTES

        st.caption(f"⚖️ Computed with **{weights}** weights ({FORMAT_NOTES[weights]}), not float32 as loaded.")
    from views.chrome.navigation import small_map

    small_map()  # where this page stands in the model


def stage_link(page: str, label: str, icon: str | None = None, query: dict[str, str] | None = None) -> None:
    """Link to another stage's page (with `query` as its link's parameters); plain text when the page is not in the
    navigation (AppTest runs one page file alone)."""
    from streamlit.errors import StreamlitAPIException, StreamlitPageNotFoundError

    try:
        st.page_link(page, label=label, icon=icon, query_params=query)
    except (StreamlitPageNotFoundError, StreamlitAPIException, KeyError):
        st.caption(f"→ {label}")


class PageEnd(Exception):
    """Raised by end_page(): app.py ends the run there as a complete one."""


def end_page() -> NoReturn:
    """End the page here, its message drawn (st.stop()'s job). Under app.py it raises PageEnd, which app.py catches,
    so the sidebar's link, the pass count and the end-of-run mark are still drawn: after st.stop() Streamlit drops
    every element asked for (it keeps raising StopException at each one). A page run alone (AppTest) stops as usual.
    The page's Back and Next are drawn first, as at the end of every page."""
    from views.chrome.navigation import back_next

    back_next()
    if st.session_state.get("_whole_run"):
        raise PageEnd
    st.stop()


def run_marker() -> None:
    """An invisible mark carrying this session's count of completed runs, drawn as the last thing of every run that
    completed: a whole run (app.py; st.stop() and a page's error included, a run that ends in st.rerun() draws none)
    and a fragment's own rerun (`fragment`). Browser tests wait for a newer one (tests/kit/browser.py's settle)."""
    import secrets

    ss = st.session_state
    ss["_runs_done"] = ss.get("_runs_done", 0) + 1
    ss.setdefault("_run_session", secrets.token_hex(4))
    st.html(f'<span class="tpe-run-done" data-run="{ss["_runs_done"]}" data-session="{ss["_run_session"]}" '
            'hidden></span>')


def fragment(draw):
    """st.fragment for a page's controls that redraw one part: its own rerun updates the link and ends with a
    run marker (inside the fragment, so it is replaced by the next one); within a whole run, app.py's are the ones."""
    import functools

    from streamlit.runtime.scriptrunner_utils.exceptions import RerunException

    @st.fragment
    @functools.wraps(draw)
    def part(*args, **kwargs):
        completed = True  # an error shown in the fragment completes its run too
        try:
            return draw(*args, **kwargs)
        except RerunException:
            completed = False
            raise
        finally:
            if completed:  # the link follows the fragment's controls: app.py's sync is not reached in its own
                from views.links import url_state  # rerun, and a fragment fills the share box then only if it did in

                url_state.sync()  # the whole run too (Streamlit refuses a fragment's first write to an outer box)
            if completed and st.session_state.get("_whole_run") is False:  # its own rerun, in the app (not AppTest)
                run_marker()
    return part
