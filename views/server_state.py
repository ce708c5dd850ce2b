"""What one server holds for every session: the model, the two stores of finished work, the queue.

Each is made once per server process (`st.cache_resource`). The model handle reads its name,
dimensions and tokenizer from its files at once; the network loads on first use, or in the
background after the first page.
"""
from __future__ import annotations

import streamlit as st

from pipeline.disk_store import DiskStore
from pipeline.errors import InputError
from pipeline.model.handle import ModelHandle
from pipeline.model.weights_cache import cache_root
from pipeline.run_queue import RunQueue
from pipeline.run_store import RunStore, deep_size

RESULT_MAX_BYTES = 256 * 2**20  # the results store beside the runs (a branch's trace holds arrays too)
APP_MAX_PROMPT_TOKENS = 4096  # a 4k prompt is ~30 s of prefill here and ~650 MB of captures; 8k is twice both


@st.cache_resource(show_spinner="Reading the model's files (first time: converting the weights, ~15-45 s)...")
def get_model() -> ModelHandle:
    handle = ModelHandle()
    handle.folder  # noqa: B018 - converts the weights on the very first start, under this spinner
    return handle


@st.cache_resource
def run_store() -> RunStore:
    """Finished runs: the hot ones in memory (1.2 GB of arrays at most), all of them on disk (4 GB).
    One run per distinct request (plain values as the key), shared by every page and session.
    A cache folder that cannot be written (read-only, full) turns the disk off; `views.runs.disk_store_note` says so."""
    return RunStore(disk=DiskStore(cache_root() / "runs"))


@st.cache_resource
def result_store() -> RunStore:
    """Results of other model runs (prompt-caching scenarios, cache on/off measurements, branch and
    constrained traces), computed once per server; 256 MB at most, by their real size."""
    return RunStore(max_bytes=RESULT_MAX_BYTES, size_of=deep_size)


@st.cache_resource
def run_queue() -> RunQueue:
    """The one line in front of the model, shared by every session. Chat requests waiting together
    run as one batch: each prompt is prefilled on its own, the answers are decoded together.
    Each run is logged on the server's console (size of the batch, seconds, jobs still waiting)."""
    import logging

    queue_log = logging.getLogger("pipeline.run_queue")
    if not queue_log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
        queue_log.addHandler(handler)
        queue_log.setLevel(logging.INFO)
    return RunQueue(batch_runners={"trace": run_trace_batch})


def run_trace_batch(jobs: list[tuple]) -> list:
    """jobs: [(key, request, arrived_at)] -> [Trace or InputError]; each trace is stored under its key."""
    from pipeline.trace import run_traces

    lm = get_model()
    results = run_traces([r for _, r, _ in jobs], lm, APP_MAX_PROMPT_TOKENS, [t for _, _, t in jobs])
    for (key, _, _), result in zip(jobs, results):
        if not isinstance(result, InputError):
            run_store().put(key, result)
    return results
