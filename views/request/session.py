"""This browser session's request: the sidebar's fields in session state -> a ChatRequest, and the
plain-value keys a run is stored under."""
from __future__ import annotations

from dataclasses import asdict, replace

import streamlit as st

from pipeline.model.interface import LanguageModel
from pipeline.model.passes import PassCounter
from pipeline.model.registry import resolve
from pipeline.model.weight_formats import DEFAULT_WEIGHTS
from pipeline.run.record import Trace
from pipeline.stages.logit_bias import check_vocabulary, parse_logit_bias
from pipeline.stages.request import (
    MAX_MESSAGE_CHARS,
    ChatRequest,
    GenerationOptions,
    parse_turns,
)
from views.server.state import default_model_key, default_weights, get_model

DEFAULT_QUESTION = "Are tomatoes fruit?"
_OPTIONS = asdict(GenerationOptions())  # the one source of generation defaults
DEFAULTS = {"question": DEFAULT_QUESTION, "system": "", "history": "",
            **{k: v for k, v in _OPTIONS.items() if k not in ("stop", "logit_bias")}, "stop": "", "logit_bias": "",
            "model": default_model_key(), "prompt_format": resolve(default_model_key()).starting_format,
            "weights": default_weights()}  # a base model starts on plain text
MODEL_FIELDS = ("model", "prompt_format", "weights")  # the model picker's fields (kept by "Reset ...")
TEXT_LIMIT = MAX_MESSAGE_CHARS  # the sidebar's text fields refuse more than the request accepts


def init_state() -> None:
    for key, value in DEFAULTS.items():
        st.session_state.setdefault(f"req_{key}", value)


FORM_KEYS = tuple(f"req_{k}" for k in DEFAULTS if k not in MODEL_FIELDS)  # the request form's widgets


def show_values_in_form() -> None:
    """Give each of the request form's widgets its value again, just before the form is drawn.

    Streamlit tells the browser a keyed widget's value only in a run that set it through session state;
    in other runs the browser keeps what it shows. A widget that first appears from such a later run (its
    first run's message replaced by the next one's before the browser drew it: a busy server, a run
    started again) shows its own default (a slider's minimum, an empty question) while the server holds
    the request, and the next submit sends those defaults back. Seen in CI: the question box empty on a
    page opened from a short link, and once every slider at its minimum (an answer of one token).
    Setting each key again makes every run carry the value. The cost: an edit not yet submitted is
    replaced by the request the pages show when another control reruns the page."""
    for key in FORM_KEYS:
        st.session_state[key] = st.session_state[key]


def current_request() -> ChatRequest:
    """The request the sidebar describes (raises InputError for bad input)."""
    init_state()
    return request_from_fields({k: st.session_state[f"req_{k}"] for k in DEFAULTS}, get_model())


def request_from_fields(fields: dict, lm: LanguageModel) -> ChatRequest:
    """The request that the sidebar's fields describe ({name: value} by DEFAULTS' names, as session state holds
    them without `req_`), on model handle `lm` (the picked one); raises InputError for bad input. The sidebar's
    request and a lesson's stage (views/server/lesson_runs.py) are made here, so both are stored under one key."""
    f = fields
    options = GenerationOptions(
        max_new_tokens=int(f["max_new_tokens"]), temperature=float(f["temperature"]), top_k=int(f["top_k"]),
        top_p=float(f["top_p"]), min_p=float(f["min_p"]), seed=int(f["seed"]),
        stop=tuple(x for x in f["stop"].split("|") if x), repetition_penalty=float(f["repetition_penalty"]),
        presence_penalty=float(f["presence_penalty"]), frequency_penalty=float(f["frequency_penalty"]),
        logit_bias=parse_logit_bias(f["logit_bias"]),  # 'id:bias, ...'
    )
    check_vocabulary(options, lm.config_dims.V)
    history = parse_turns(f["history"], "history", roles=("user", "assistant"))
    spec = lm.spec
    prompt_format = f["prompt_format"] if offers_plain_text(spec) else "chat"
    request = ChatRequest.from_question(f["question"], system=f["system"].strip() or None, history=list(history),
                                        options=options, prompt_format=prompt_format, weights=f["weights"])
    return replace(request, model=model_label(spec))


def offers_plain_text(spec) -> bool:
    """A base model (or a folder, not known to be tuned) may be sent plain text; an instruct model is chatted to."""
    return spec.instruct is not True


def model_label(spec) -> str:
    """What a request names its model by: the display name, or a folder's path (both resolve() back)."""
    return spec.key if spec.is_local else spec.display_name


def session_passes() -> PassCounter:
    """Forward passes run on behalf of this browser session (not everyone's)."""
    return st.session_state.setdefault("forward_passes", PassCounter())


def passes_caption(passes: PassCounter) -> str:
    """The sidebar's count: the passes this session's requests took part in, and how many of them were batched
    passes that also ran other requests (each such pass is counted by every session in it)."""
    shared = f" ({passes.shared} of them batched passes shared with other requests)" if passes.shared else ""
    return f"Forward passes run for your session: {passes.n}{shared}."


def run_key(model_name: str, messages: tuple, options: GenerationOptions, prompt_format: str = "chat",
            weights: str = DEFAULT_WEIGHTS) -> tuple:
    """Plain values that identify a run: the model, the messages, every option by name, the prompt format, the
    weight format."""
    return model_name, messages, repr(sorted(options.to_dict().items())), prompt_format, weights


def request_key(request: ChatRequest) -> tuple:
    """The store key of `request`'s run on the model it names (request.model)."""
    return run_key(request.model, request.messages, request.options, request.prompt_format, request.weights)


def request_key_of(trace: Trace) -> tuple:
    """A key for what grows from a trace (its branches): its model, messages, options and prompt ids (a trace
    does not record its prompt format; its prompt's ids differ between the formats)."""
    return run_key(trace.dims.name, trace.request.messages, trace.request.options,
                   weights=trace.dims.weights) + (tuple(trace.ids),)
