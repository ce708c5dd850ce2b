"""This browser session's request: the sidebar's fields in session state -> a ChatRequest, and the
plain-value keys a run is stored under."""
from __future__ import annotations

from dataclasses import asdict

import streamlit as st

from pipeline.model.passes import PassCounter
from pipeline.stages.request import MAX_MESSAGE_CHARS, ChatRequest, GenerationOptions, parse_turns
from pipeline.trace import Trace
from views.server_state import get_model

DEFAULT_QUESTION = "Are tomatoes fruit?"
_OPTIONS = asdict(GenerationOptions())  # the one source of generation defaults
DEFAULTS = {"question": DEFAULT_QUESTION, "system": "", "history": "",
            **{k: v for k, v in _OPTIONS.items() if k != "stop"}, "stop": ""}
TEXT_LIMIT = MAX_MESSAGE_CHARS  # the sidebar's text fields refuse more than the request accepts


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


def session_passes() -> PassCounter:
    """Forward passes run on behalf of this browser session (not everyone's)."""
    return st.session_state.setdefault("forward_passes", PassCounter())


def run_key(model_name: str, messages: tuple, options: GenerationOptions) -> tuple:
    """Plain values that identify a run: the model, the messages and every option, by name."""
    return model_name, messages, repr(sorted(options.to_dict().items()))


def request_key(request: ChatRequest) -> tuple:
    """The store key of `request`'s run on this server's model."""
    return run_key(get_model().name, request.messages, request.options)


def request_key_of(trace: Trace) -> tuple:
    """The store key of the run a trace (or its branches) came from."""
    return run_key(trace.dims.name, trace.request.messages, trace.request.options)
