"""A button's result that stays on the page until its inputs change: kept in this session's state under a name,
with the inputs it was made from (pressing another button on the page no longer wipes it)."""
from typing import Callable

import streamlit as st


def kept_result(name: str, inputs: tuple, compute: Callable[[], object] | None = None):
    """compute() (when given: its button was pressed) kept under `name` with `inputs`; else what this session kept
    under `name` if it was made from the same `inputs`, or None."""
    if compute is not None:
        st.session_state[name] = (inputs, compute())
    kept = st.session_state.get(name)
    return kept[1] if kept is not None and kept[0] == inputs else None
