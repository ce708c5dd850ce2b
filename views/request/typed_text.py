"""Text typed into a page's own box, checked before the page uses it; each message names the box."""
from __future__ import annotations

import streamlit as st

from pipeline.core.errors import InputError
from ui.escape import markdown_text


def typed_text(label: str, text: str, limit: int) -> str:
    """`text` as the page may use it; `label` names the box as the page shows it.

    At most `limit` characters: a longer text is cut there, with a note. The box's max_chars cuts what the browser
    sends (Streamlit cuts it again on the server), silently; text put in session state is cut here.
    A lone surrogate never gets this far: the browser removes it, with its own note (ui/text_guard.py)."""
    if len(text) >= limit:
        st.info(f"**{markdown_text(label)}** takes at most {limit:,} characters; a longer text is cut there.")
    return text[:limit]


def box_error(label: str, e: InputError) -> None:
    """What the page could not use in the box `label`, and why (the pipeline's words, without its field name)."""
    st.error(f"Please fix **{markdown_text(label)}** — {markdown_text(e.message)}")
