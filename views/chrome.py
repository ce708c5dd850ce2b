"""What every page draws around its content: the title and intro, links to other stages' pages."""
from __future__ import annotations

import streamlit as st


def page_header(title: str, intro: str) -> None:
    st.title(title)
    st.caption(intro)
    from views.server_state import picked_weights

    weights = picked_weights()
    if weights != "fp32":  # what every number below was computed in
        from pipeline.model.weight_formats import FORMAT_NOTES

        st.caption(f"⚖️ Computed with **{weights}** weights ({FORMAT_NOTES[weights]}), not float32 as loaded.")


def stage_link(page: str, label: str, icon: str | None = None) -> None:
    """Link to another stage's page; plain text when the page is not in the navigation
    (AppTest runs one page file alone)."""
    from streamlit.errors import StreamlitAPIException, StreamlitPageNotFoundError

    try:
        st.page_link(page, label=label, icon=icon)
    except (StreamlitPageNotFoundError, StreamlitAPIException, KeyError):
        st.caption(f"→ {label}")
