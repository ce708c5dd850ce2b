"""The one UI module that owns caching and session state. Views import from here.

The model is one handle per server (`st.cache_resource`): its name, dimensions and tokenizer come from
its files at once; the network loads on first use, or in the background after the first page. Finished runs live in one RunStore per
server: one run per distinct request (plain values as the key), shared by every page and session,
bounded in bytes.
"""
from __future__ import annotations

import time
from dataclasses import asdict

import streamlit as st

from pipeline.errors import InputError
from pipeline.disk_store import DiskStore
from pipeline.model.handle import ModelHandle
from pipeline.model.passes import PassCounter
from pipeline.model.weights_cache import cache_root
from pipeline.run_queue import RunQueue, cost_of
from pipeline.run_store import RunStore, deep_size
from pipeline.stages.request import MAX_MESSAGE_CHARS, ChatRequest, GenerationOptions, parse_turns
from pipeline.trace import Trace, run_trace
from ui.escape import code_span, markdown_text
from pipeline.model.interface import LanguageModel

DEFAULT_QUESTION = "Are tomatoes fruit?"
_OPTIONS = asdict(GenerationOptions())  # the one source of generation defaults
DEFAULTS = {"question": DEFAULT_QUESTION, "system": "", "history": "",
            **{k: v for k, v in _OPTIONS.items() if k != "stop"}, "stop": ""}
TEXT_LIMIT = MAX_MESSAGE_CHARS  # the sidebar's text fields refuse more than the request accepts
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
    A cache folder that cannot be written (read-only, full) turns the disk off; `disk_store_note` says so."""
    return RunStore(disk=DiskStore(cache_root() / "runs"))


def disk_store_note() -> None:
    """One line under a run when runs are not being saved to disk (they are served from memory)."""
    disk = run_store().disk
    if disk is not None and disk.problem:
        st.caption(f"💾 Runs are kept in memory only, not saved in {code_span(str(disk.folder))}: {disk.problem}.")


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


@st.cache_resource
def result_store() -> RunStore:
    """Results of other model runs (prompt-caching scenarios, cache on/off measurements, branch and
    constrained traces), computed once per server; 256 MB at most, by their real size."""
    return RunStore(max_bytes=RESULT_MAX_BYTES, size_of=deep_size)


def queued(key: tuple, compute, cost: int, prompt_tokens: int = 0):
    """`compute()`'s result, run once per server through the model's queue (its place shown meanwhile).
    prompt_tokens: the longest prompt it runs (a long one is refused while the queue is long)."""
    stored = result_store().peek(key)
    if stored is not None:
        return stored
    return wait_for(run_queue().submit(key, lambda: result_store().get_or_run(key, compute), cost, prompt_tokens))


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


def run_key(model_name: str, messages: tuple, options: GenerationOptions) -> tuple:
    """Plain values that identify a run: the model, the messages and every option, by name."""
    return model_name, messages, repr(sorted(options.to_dict().items()))


def request_key(request: ChatRequest) -> tuple:
    return run_key(get_model().name, request.messages, request.options)


def queued_run(request: ChatRequest) -> Trace:
    """Queue the request (arrival order), or join an identical one; returns its trace when done."""
    from pipeline.stages.tokens import tokenize_request

    lm, key = get_model(), request_key(request)
    n_prompt = len(tokenize_request(lm.tokenizer, request).ids)
    work = lambda: run_store().get_or_run(key, lambda: run_trace(request, lm, APP_MAX_PROMPT_TOKENS))  # noqa: E731
    cost = cost_of(n_prompt, request.options.max_new_tokens)
    return wait_for(run_queue().submit(key, work, cost, n_prompt, batch=("trace", (key, request, time.perf_counter()))))


def wait_for(ticket) -> object:
    """Show the ticket's place in the queue and an estimate until it is done."""
    if not ticket.wait(0.3):
        box, shown = st.empty(), None
        while not ticket.wait(1.0):
            ahead = ticket.position()
            where = "running now" if ahead == 0 else f"number {ahead + 1} in line ({ahead} ahead of you)"
            message = (f"⏳ Your request is {where}; done in about {waiting_time(ticket.estimate_s())}. Requests "
                       "run in the order they arrived (waiting chat requests run together); identical requests "
                       "share one run.")
            if message != shown:  # a room of browsers redrawing every second costs the model real CPU
                box.info(message)
                shown = message
        box.empty()
    return ticket.result()


def waiting_time(seconds: float) -> str:
    """A wait in steps a person can read and that do not change every second: 4 -> 'a few seconds',
    37 -> '40 s', 95 -> '1.5 min' (rounded to 10 s, past a minute to half minutes)."""
    if seconds < 10:
        return "a few seconds"
    if seconds < 60:
        return f"{round(seconds / 10) * 10:.0f} s"
    return f"{round(seconds / 30) / 2:g} min"


def trace_for(request: ChatRequest) -> Trace:
    """The stored run for `request`, running the model only if nobody has asked it yet."""
    stored = run_store().peek(request_key(request), disk=True)
    trace = stored if stored is not None else queued_run(request)
    disk_store_note()
    return trace


RUN_GONE = ("This run is no longer stored on the server (it keeps the most recent runs, and this one was "
            "dropped since the page was drawn): press Run the model again, then download.")


def stored_download(key: tuple, render) -> str:
    """A download button's content, made when clicked: `render(run)` of the run stored under `key`, or a note
    saying it is gone (the button outlives the page; it holds the key, not the run)."""
    run = run_store().peek(key, disk=True)
    return render(run) if run is not None else RUN_GONE


def stored_trace() -> Trace | None:
    """The sidebar request's run if it is already stored (never runs the model)."""
    try:
        return run_store().peek(request_key(current_request()))
    except InputError:
        return None


def current_trace(original: bool = False) -> Trace:
    """The captured run for the sidebar's request — or the branch of it this session chose to show
    (see the What-if page) unless `original`; shows a clear message and stops on bad input."""
    try:
        request = current_request()
        trace = trace_for(request)
        path = st.session_state.get("branch_shown")
        if original or not path or path[0] != request_key(request):
            return trace
        st.info(f"Showing a branch of this run: {markdown_text(branch_label(path[1], trace))}. The What-if page goes back.", icon="🌿")
        return branch_for(trace, path[1])
    except InputError as e:
        st.error(f"Please fix the request — {markdown_text(e)}")
        st.stop()


def branch_for(trace: Trace, path: tuple[tuple[int, int], ...]) -> Trace:
    """The run taken another way at each (step, token id) of `path` in turn, once per server."""
    from pipeline.trace import branch_trace

    for n in range(1, len(path) + 1):
        step, token = path[n - 1]
        parent = trace
        trace = queued(("branch", request_key_of(trace), path[:n]),
                       lambda parent=parent, step=step, token=token: branch_trace(parent, step, token, get_model()),
                       cost=cost_of(0, len(parent.steps) - step))
    return trace


def request_key_of(trace: Trace) -> tuple:
    """The store key of the run a trace (or its branches) came from."""
    return run_key(trace.dims.name, trace.request.messages, trace.request.options)


def branch_label(path: tuple[tuple[int, int], ...], original: Trace | None = None) -> str:
    """'step 4: '<0xA0> → 토'' — each forced token named after what the model had read before it
    (with `original`, the run the path starts from; else after nothing)."""
    from pipeline.text import continuation_label

    tok = get_model().tokenizer
    names = []
    for n, (s, t) in enumerate(path):
        parent = None if original is None else branch_for(original, path[:n]) if n else original
        context = [] if parent is None else list(parent.ids) + parent.generated_token_ids[:s]
        names.append(f"step {s}: {continuation_label(tok, context, t)!r}")
    return " → ".join(names) or "the original run"


def played(key: str, block_size: int = 16) -> list[dict]:
    """A prompt-caching scenario played on the model (plain records), once per server, in the queue."""
    return queued(("scenario", key, block_size), lambda: _play(get_model(), key, block_size), 4000)


def played_again(key: str, block_size: int = 16) -> list[dict]:
    """Play a scenario again now and keep it in place of the stored one, for everyone on this server.
    At most once a minute per scenario: visitors asking in the same minute share one replay."""
    minute = int(time.time() // 60)

    def work() -> list[dict]:
        rows = _play(get_model(), key, block_size)
        result_store().put(("scenario", key, block_size), rows)
        return rows

    return queued(("scenario again", key, block_size, minute), work, 4000)  # kept: a later click that minute reads it


def prompt_cache_conversation(block_size: int = 16) -> list[dict]:
    return played("conversation", block_size)


@st.cache_resource
def warm_up() -> dict:
    """At server start: queue the default request and the prompt-caching scenarios in the background,
    so the first visitors do not wait. Returns {what: ticket} for the Start page to report on."""
    from pipeline.prompt_cache.scenarios import scenarios

    lm = get_model()
    default = ChatRequest.from_question(DEFAULT_QUESTION)
    key = request_key(default)
    jobs = {"the default request": run_queue().submit(
        key, lambda: run_store().get_or_run(key, lambda: run_trace(default, lm)), cost=1000)}
    for name in scenarios():  # every scenario the page's buttons open, at the page's default block size
        scenario_key = ("scenario", name, 16)  # a new name: the lambda above reads `key` when it runs
        jobs[f"prompt caching: {scenarios()[name].title}"] = run_queue().submit(
            scenario_key, lambda k=scenario_key, name=name: result_store().get_or_run(
                k, lambda: _play(lm, name)), cost=4000, background=True)
    return jobs


def _play(lm: LanguageModel, name: str, block_size: int = 16) -> list[dict]:
    """Imported when it runs, in the queue's thread: the first page's script never waits on torch's import."""
    from pipeline.prompt_cache.playback import play
    from pipeline.prompt_cache.scenarios import scenarios

    return play(lm, scenarios()[name], block_size)


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
