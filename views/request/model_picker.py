"""The sidebar's model picker: which model every page runs and draws, what kind of model it is, and (for
a base model) whether the request is sent as chat turns or as plain text.

The pick lives in session state (`req_model`, `req_prompt_format`, `req_weights`) and in the link (`?model=`,
`?format=`, `?weights=`); `views.server.state.get_model()` reads it (the weights: `picked_weights()`).
"""
from __future__ import annotations

import streamlit as st

from pipeline.core.errors import InputError
from pipeline.model.handle import ModelHandle
from pipeline.model.registry import resolve
from pipeline.model.weight_formats import FORMAT_NOTES, WEIGHT_FORMATS
from ui.escape import markdown_text
from views.request.session import offers_plain_text
from views.server.state import default_model_key, get_model, offered_models, weights_note

# Page controls whose ranges come from the model (layers, heads, positions, vocabulary ids): dropped when
# the model changes, so each page opens on its own defaults for the new one.
MODEL_BOUND_PREFIXES = ("at_", "rope_", "ly_", "em_", "nt_", "kv_")
FORMAT_LABELS = {"chat": "chat turns (the model's chat format)", "plain": "plain text (completion, no turn markers)"}


def picked_model(notes: list[str]) -> ModelHandle:
    """The handle of the model this session picked. A model that cannot be read (a folder that went
    bad) or is no longer offered: a note, and the default model. Controls bound to the model are reset
    when it changed since this session's last run."""
    s = st.session_state
    offered, _ = offered_models()
    if resolve(s.get("req_model") or default_model_key()).key not in offered:
        notes.append(f"The model {markdown_text(str(s.get('req_model')))} is not offered here; using the default.")
        s["req_model"] = default_model_key()
    try:
        lm = get_model()
        lm.config_dims  # noqa: B018 - reads config.json: a folder without a usable one fails here, not on a page
    except (InputError, OSError, ValueError, AttributeError) as e:
        notes.append(f"The model {markdown_text(str(s.req_model))} could not be read ({markdown_text(e)}); "
                     "using the default model.")
        s["req_model"] = default_model_key()
        lm = get_model()
    if s.get("_model_shown") != s["req_model"]:
        if s.get("_model_shown") is not None:
            for key in [k for k in s if isinstance(k, str) and k.startswith(MODEL_BOUND_PREFIXES)]:
                del s[key]
        s["_model_shown"] = s["req_model"]
    if "req_top_k" in s and s.req_top_k > lm.config_dims.V:  # top-k goes up to this model's vocabulary
        s["req_top_k"] = lm.config_dims.V
    return lm


def start_on_its_format() -> None:
    """A model picked here starts on its own format: plain text for a base model (what it was trained on), chat turns
    otherwise. (A link's model keeps the link's format: the link reproduces a view.)"""
    s = st.session_state
    s["req_prompt_format"] = resolve(s["req_model"]).starting_format


def model_picker() -> None:
    """The picker, one line on what the model is, and for a base model the prompt-format choice."""
    offered, problems = offered_models()
    st.selectbox("Model", list(offered), format_func=offered.get, key="req_model", on_change=start_on_its_format,
                 help="Every page runs and draws this model; the link carries it (`?model=`).")
    spec = get_model().spec
    st.caption(markdown_text(spec.note.split(": ")[0].split(". ")[0]) + ".",
               help=markdown_text(spec.note))  # one line; the whole note on hover
    if offers_plain_text(spec):
        st.radio("Send the request as", list(FORMAT_LABELS), format_func=FORMAT_LABELS.get,
                 key="req_prompt_format", horizontal=False,
                 help="A base model was trained on plain text: chat turns are a format it was never tuned on.")
    st.selectbox("Weights", WEIGHT_FORMATS, key="req_weights", format_func=lambda w: f"{w}: {FORMAT_NOTES[w]}",
                 help="What every page computes in: fp32 as loaded, or a copy of the weights converted to fewer "
                      "bytes (made on first use). The link carries it (`?weights=`); Faster decode compares them.")
    for problem in problems:
        st.warning(markdown_text(problem), icon="📁")
    note = weights_note()
    if note:
        st.warning(markdown_text(note), icon="⚙️")
