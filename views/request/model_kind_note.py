"""Where an answer is shown (Journey, Generation, Next token): what chat turns do to a base model, said once in the
model's own terms (pipeline/model/model_kind.py). Nothing for an instruct model or for plain text."""
from __future__ import annotations

import streamlit as st

from pipeline.core.errors import InputError
from pipeline.model.model_kind import chat_turns_note
from ui.escape import markdown_text


def base_model_note() -> None:
    from views.request.session import current_request
    from views.server.state import get_model

    try:
        note = chat_turns_note(get_model().spec, current_request().prompt_format)
    except InputError:  # a bad request: the page has said so already
        return
    if note:
        st.info(markdown_text(note), icon="🧱")
