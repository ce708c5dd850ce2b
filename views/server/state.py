"""What one server holds for every session: the models, the two stores of finished work, the queue.

Each is made once per server process (`st.cache_resource`); a model handle once per model. A handle
reads its name, dimensions and tokenizer from its files at once; the network loads on first use, or
in the background after the first page.

`get_model()` is the model this session picked in the sidebar (`req_model`), `get_model(name)` a named
one. Work run in the queue's thread runs `using_model(key)`, so the `get_model()` it calls is the
model of the session that asked for it.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
from typing import TYPE_CHECKING

import streamlit as st

from pipeline.core.errors import InputError
from pipeline.model.handle import ModelHandle
from pipeline.model.registry import DEFAULT_MODEL, resolve
from pipeline.model.weight_formats import DEFAULT_WEIGHTS, WEIGHT_FORMATS
from pipeline.model.weights_cache import cache_root
from pipeline.server.run_queue import RunQueue
from pipeline.server.store.memory import RunStore
from pipeline.server.wiring import finished_runs, log_queue_on_console, other_results, server_queue

if TYPE_CHECKING:
    from pipeline.prompt_cache.reuse import ServerReuse

APP_MAX_PROMPT_TOKENS = 4096  # a 4k prompt is ~30 s of prefill here and ~650 MB of captures; 8k is twice both


MODELS_ENV = "TPE_MODELS"  # more models for the picker: Hugging Face model folders, os.pathsep-separated
MODEL_PICK_ENV = "TPE_MODEL"  # the model a new session starts on (./run.sh app --model DIR sets it)
WEIGHTS_PICK_ENV = "TPE_WEIGHTS"  # the weight format a new session starts on (./run.sh app --weights bf16 sets it)
_in_work: contextvars.ContextVar[str | None] = contextvars.ContextVar("model_in_work", default=None)
_weights_in_work: contextvars.ContextVar[str | None] = contextvars.ContextVar("weights_in_work", default=None)


def default_model_key() -> str:
    """The model a new session starts on: TPE_MODEL if set and usable (a registry key or a folder; else the
    sidebar says why, see offered_models), else SmolLM2."""
    named = os.environ.get(MODEL_PICK_ENV)
    if not named:
        return DEFAULT_MODEL
    try:
        key = resolve(named).key
    except InputError:
        return DEFAULT_MODEL
    return key if key in offered_models()[0] else DEFAULT_MODEL


def default_weights() -> str:
    """The weight format a new session starts on: TPE_WEIGHTS if it names one (fp32, bf16, int8; else the sidebar
    says why, see weights_note), else fp32. A room's server may start on bf16: half the bytes read per token; a room
    of 30 new questions took a quarter less server CPU and time on a 2-core AMD EPYC with AVX-512 bf16 (docs/room.md,
    "The queue"); the Faster decode page measures the formats on the machine it runs on."""
    named = os.environ.get(WEIGHTS_PICK_ENV, "").strip()
    return named if named in WEIGHT_FORMATS else DEFAULT_WEIGHTS


def weights_note() -> str | None:
    """Why TPE_WEIGHTS is not used, when it is set to something that is not a weight format."""
    named = os.environ.get(WEIGHTS_PICK_ENV, "").strip()
    if named and named not in WEIGHT_FORMATS:
        return (f"{WEIGHTS_PICK_ENV}={named!r} is not a weight format ({', '.join(WEIGHT_FORMATS)}): "
                f"new sessions start on {DEFAULT_WEIGHTS}.")
    return None


def picked_model_key() -> str:
    """The key of the model this session picked (the queue's work: the model it runs for)."""
    key = _in_work.get()
    if key is not None:
        return key
    return _session_pick("req_model") or default_model_key()


def picked_weights() -> str:
    """The weight format this session picked (fp32, bf16, int8: pipeline.model.weight_formats); the queue's
    work: the one it runs for. Anything else (a hand-edited state): the server's default (default_weights)."""
    weights = _weights_in_work.get() or _session_pick("req_weights")
    return weights if weights in WEIGHT_FORMATS else default_weights()


def _session_pick(name: str):
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    return st.session_state.get(name) if get_script_run_ctx(suppress_warning=True) else None


def get_model(name: str | None = None, weights: str | None = None) -> ModelHandle:
    """The handle of model `name` (a registry key, a display name or a folder), or of the picked model, in
    `weights` (default: the picked weight format)."""
    return model_handle(resolve(name if name is not None else picked_model_key()).key, weights or picked_weights())


def offered_models() -> tuple[dict[str, str], list[str]]:
    """The models the sidebar offers, {key: label}: the registry's, then the folders TPE_MODELS names
    (os.pathsep-separated) and TPE_MODEL's if it is a folder; and a note for each folder that is not usable.
    A link can pick only these (never a folder of its own choosing)."""
    from pipeline.model.registry import MODELS
    from pipeline.model.weights_cache import check_model_folder

    offered = {key: spec.display_name for key, spec in MODELS.items()}
    notes = []
    named = [*os.environ.get(MODELS_ENV, "").split(os.pathsep), os.environ.get(MODEL_PICK_ENV, "")]
    for path in dict.fromkeys(p.strip() for p in named if p.strip()):
        try:
            spec = resolve(path)
            if spec.is_local:
                check_model_folder(spec.folder)
        except InputError as e:
            notes.append(f"The model folder {path!r} is not offered: {e.message}")
            continue
        offered.setdefault(spec.key, f"{spec.display_name} (folder)" if spec.is_local else spec.display_name)
    return offered, notes


@contextlib.contextmanager
def using_model(key: str, weights: str = DEFAULT_WEIGHTS):
    """Inside: `get_model()` is model `key` in `weights` (in the queue's thread, where there is no session)."""
    token, weights_token = _in_work.set(key), _weights_in_work.set(weights)
    try:
        yield
    finally:
        _in_work.reset(token)
        _weights_in_work.reset(weights_token)


@st.cache_resource(show_spinner="Reading the model's files (first time: converting the weights, ~15-60 s)...")
def model_handle(key: str, weights: str = DEFAULT_WEIGHTS) -> ModelHandle:
    """One handle per model, weight format and server (key: the registry key or the folder, resolve(...).key).
    A format other than fp32 is a converted copy of the fp32 network, made on its first use
    (pipeline.model.loader.shared_model): SmolLM2 538 MB fp32, 269 MB bf16, 220 MB int8 of parameters."""
    handle = ModelHandle(key, weights)
    handle.folder  # noqa: B018 - converts the weights on the very first start, under this spinner
    return handle


@st.cache_resource
def run_store() -> RunStore:
    """Finished runs, shared by every page and session: one run per distinct request (plain values as the key)
    (pipeline.server.wiring.finished_runs). A store skipped (read-only folder, Redis not answering):
    `views.request.runs.shared_store_note` says so."""
    return finished_runs(cache_root())


@st.cache_resource
def result_store() -> RunStore:
    """Results of other model runs (prompt-caching scenarios, cache on/off measurements, branch and
    constrained traces), computed once per server. The prompt-caching scenarios are kept on disk (or in the
    room's Redis) too: played once per cache folder or room, not once per server."""
    return other_results(cache_root(), is_scenario_key)


def is_scenario_key(key) -> bool:
    """(model, weights, "scenario", name, block size), as views.server.waiting.model_result_key makes it: a prepared
    prompt-caching scenario's rows (views/server/scenarios.py)."""
    return isinstance(key, tuple) and len(key) > 2 and key[2] == "scenario"


@st.cache_resource
def run_queue() -> RunQueue:
    """The one line in front of the model, shared by every session (pipeline.server.wiring.server_queue): each
    request on its own model, in its own weight format; finished runs go to run_store()."""
    log_queue_on_console()
    return server_queue(lambda request: get_model(resolve(request.model).key, request.weights), APP_MAX_PROMPT_TOKENS,
                        on_trace=run_store().put)


def server_reuse() -> ServerReuse:
    """The server's prefix cache (pipeline.prompt_cache.reuse.ServerReuse), one for the queue's engines (the server
    always makes it: pipeline.server.wiring.server_queue): a pass a page runs through the queue over a prompt reads
    the prompt's cached blocks from it, as a request does."""
    return run_queue().engines["trace"].reuse
