"""The one UI module that owns caching and session state. Views import from here.

The model is loaded once per server (`st.cache_resource`). Finished runs live in one RunStore per
server: one run per distinct request (plain values as the key), shared by every page and session,
bounded in bytes.
"""
from __future__ import annotations

from dataclasses import asdict

import streamlit as st

from pipeline.errors import InputError
from pipeline.model.loader import LoadedModel, PassCounter, shared_model
from pipeline.run_store import RunStore
from pipeline.stages.request import MAX_MESSAGE_CHARS, ChatRequest, GenerationOptions, parse_turns
from pipeline.trace import Trace, run_trace

DEFAULT_QUESTION = "Are tomatoes fruit?"
_OPTIONS = asdict(GenerationOptions())  # the one source of generation defaults
DEFAULTS = {"question": DEFAULT_QUESTION, "system": "", "history": "",
            **{k: v for k, v in _OPTIONS.items() if k != "stop"}, "stop": ""}
TEXT_LIMIT = MAX_MESSAGE_CHARS  # the sidebar's text fields refuse more than the request accepts
APP_MAX_PROMPT_TOKENS = 4096  # a 4k prompt is ~30 s of prefill here and ~650 MB of captures; 8k is twice both


@st.cache_resource(show_spinner="Loading SmolLM2-135M-Instruct (first time: converting the weights, ~15 s)...")
def get_model() -> LoadedModel:
    return shared_model()


@st.cache_resource
def run_store() -> RunStore:
    return RunStore()


def session_passes() -> PassCounter:
    """Forward passes run on behalf of this browser session (not everyone's)."""
    return st.session_state.setdefault("forward_passes", PassCounter())


def init_state() -> None:
    for key, value in DEFAULTS.items():
        st.session_state.setdefault(f"req_{key}", value)


def current_request() -> ChatRequest:
    """The request the sidebar describes (raises InputError for bad input)."""
    init_state()
    s = st.session_state
    options = GenerationOptions(
        max_new_tokens=int(s.req_max_new_tokens), temperature=float(s.req_temperature), top_k=int(s.req_top_k),
        top_p=float(s.req_top_p), min_p=float(s.req_min_p), seed=int(s.req_seed),
        stop=tuple(x for x in s.req_stop.split("|") if x),
    )
    history = parse_turns(s.req_history, "history", roles=("user", "assistant"))
    return ChatRequest.from_question(s.req_question, system=s.req_system.strip() or None, history=list(history),
                                     options=options)


def request_key(request: ChatRequest) -> tuple:
    """Plain values that identify a run: the messages and every option, by name."""
    return request.messages, repr(sorted(request.options.to_dict().items()))


def trace_for(request: ChatRequest) -> Trace:
    """The stored run for `request`, running the model only if nobody has asked it yet."""
    with st.spinner("Running the model on your request..."):
        return run_store().get_or_run(request_key(request),
                                      lambda: run_trace(request, get_model(), APP_MAX_PROMPT_TOKENS))


def stored_trace() -> Trace | None:
    """The sidebar request's run if it is already stored (never runs the model)."""
    try:
        return run_store().peek(request_key(current_request()))
    except InputError:
        return None


def current_trace() -> Trace:
    """The captured run for the sidebar's request; shows a clear message and stops on bad input."""
    try:
        return trace_for(current_request())
    except InputError as e:
        st.error(f"Please fix the request — {e}")
        st.stop()


@st.cache_data(show_spinner="Playing the conversation through the prompt cache...")
def prompt_cache_conversation(block_size: int = 16) -> list[dict]:
    """The prompt-caching conversation scenario played on the model (no cold re-runs): plain records."""
    from pipeline.prompt_cache.playback import play
    from pipeline.prompt_cache.scenarios import scenarios

    return play(get_model(), scenarios()["conversation"], block_size, measure_cold=False)


def page_header(title: str, intro: str) -> None:
    st.title(title)
    st.caption(intro)


def stage_link(page: str, label: str, icon: str | None = None) -> None:
    """Link to another stage's page; plain text when the page is not in the navigation
    (AppTest runs one page file alone)."""
    from streamlit.errors import StreamlitAPIException, StreamlitPageNotFoundError

    try:
        st.page_link(page, label=label, icon=icon)
    except (StreamlitPageNotFoundError, StreamlitAPIException, KeyError):
        st.caption(f"→ {label}")
