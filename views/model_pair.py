"""The two models the Compare models page and the Tokens page put side by side: the server's own model
(server_state.get_model, so it is never loaded twice) and the other registry model, one handle each per
server process. A handle reads its tokenizer from its files; the network loads only when a page runs it."""
from __future__ import annotations

import streamlit as st

from pipeline.model.handle import ModelHandle
from pipeline.model.registry import MODELS
from views.server_state import get_model


@st.cache_resource(show_spinner="Reading the other model's files (first time: converting its weights)...")
def _other_handle(key: str) -> ModelHandle:
    handle = ModelHandle(key)
    handle.folder  # noqa: B018 - converts the weights on the very first use, under this spinner
    return handle


def model_handle(key: str) -> ModelHandle:
    """The handle of registry model `key`: the server's own model when it is that one."""
    own = get_model()
    return own if own.spec.key == key else _other_handle(key)


def compared_keys() -> tuple[str, str]:
    """The server's model first, then the other registry model (SmolLM2 and Gemma)."""
    own = get_model().spec.key
    return own, next(k for k in MODELS if k != own)
