"""The one UI module that owns caching and session state. Pages import from here.

The model is loaded once per server (`st.cache_resource`); one trace is captured per distinct
request (plain values as the key) and shared by every page and every browser session.
"""
from __future__ import annotations

import streamlit as st

from pipeline.errors import InputError
from pipeline.loader import LoadedModel, shared_model
from pipeline.options import ChatRequest, GenerationOptions
from pipeline.trace import Trace, run_trace

DEFAULT_QUESTION = "Are tomatoes fruit?"
DEFAULTS = {
    "question": DEFAULT_QUESTION,
    "system": "",
    "history": "",
    "max_new_tokens": 32,
    "temperature": 0.0,
    "top_k": 0,
    "top_p": 1.0,
    "min_p": 0.0,
    "seed": 0,
    "stop": "",
}


@st.cache_resource(show_spinner="Loading SmolLM2-135M-Instruct (first time: converting the weights, ~15 s)...")
def get_model() -> LoadedModel:
    return shared_model()


# Traces are shared by every page and session. A short request's trace is ~20 MB, a 512-token
# one ~430 MB (its full attention), so only a handful are kept.
@st.cache_resource(max_entries=6, show_spinner="Running the model on your request...")
def _cached_trace(messages: tuple, options: tuple) -> Trace:
    request = ChatRequest(messages, GenerationOptions(*options))
    return run_trace(request, get_model())


def init_state() -> None:
    for key, value in DEFAULTS.items():
        st.session_state.setdefault(f"req_{key}", value)


def parse_history(text: str) -> list[tuple[str, str]]:
    """'user: hi\\nassistant: hello' -> [('user', 'hi'), ('assistant', 'hello')]."""
    turns = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        role, sep, content = line.partition(":")
        role = role.strip().lower()
        if not sep or role not in ("user", "assistant"):
            raise InputError("history", f"line {n} must start with 'user:' or 'assistant:'.")
        turns.append((role, content.strip()))
    return turns


def current_request() -> ChatRequest:
    """The request the sidebar describes (raises InputError for bad input)."""
    init_state()
    s = st.session_state
    options = GenerationOptions(
        max_new_tokens=int(s.req_max_new_tokens), temperature=float(s.req_temperature), top_k=int(s.req_top_k),
        top_p=float(s.req_top_p), min_p=float(s.req_min_p), seed=int(s.req_seed),
        stop=tuple(x for x in s.req_stop.split("|") if x),
    )
    request = ChatRequest.from_question(s.req_question, system=s.req_system.strip() or None,
                                        history=parse_history(s.req_history), options=options)
    return request.validate()


def current_trace() -> Trace:
    """The captured run for the sidebar's request; shows a clear message and stops on bad input."""
    try:
        request = current_request()
        o = request.options
        return _cached_trace(request.messages, (o.max_new_tokens, o.temperature, o.top_k, o.top_p, o.min_p,
                                                o.seed, o.stop))
    except InputError as e:
        st.error(f"Please fix the request — {e}")
        st.stop()


def page_header(title: str, intro: str) -> None:
    st.title(title)
    st.caption(intro)


def stage_link(page: str, label: str, icon: str | None = None) -> None:
    """Link to another stage's page; plain text when the page is not in the navigation
    (AppTest runs one page file alone, and a page may not exist yet)."""
    from streamlit.errors import StreamlitAPIException, StreamlitPageNotFoundError

    try:
        st.page_link(page, label=label, icon=icon)
    except (StreamlitPageNotFoundError, StreamlitAPIException, KeyError):
        st.caption(f"→ {label} ({page})")
