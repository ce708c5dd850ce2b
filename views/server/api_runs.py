"""The API's requests on the pages' own queue and stores (server.py wires them to the HTTP handlers of
pipeline/api/serving/handlers.py): the models offered, the link that opens a request on the pages, and the request
queued as a page would queue it, so an API request and a page share one model, one line and one store of runs."""
from __future__ import annotations

import threading
import time

from pipeline.api.call import ModelInfo
from pipeline.api.errors import ApiError, from_input_error
from pipeline.core.errors import InputError
from pipeline.stages.decode_record import FinishReason
from pipeline.stages.logit_bias import logit_bias_text
from pipeline.stages.request import ChatRequest

QUEUE_LONG_RETRY_S = 30  # a long prompt refused while the queue is long: when to try again


class QueueRuns:
    """What pipeline.api.serving.handlers.ApiHandlers asks of the server, answered from views.server.state."""

    def __init__(self):
        self._catalogue: dict[str, ModelInfo] = {}
        self._catalogue_lock = threading.Lock()  # requests arrive on several threads: none may read a half-made one

    def catalogue(self) -> dict[str, ModelInfo]:
        """The picker's models by key and name (lower-cased too), each with its window, read from its files once."""
        with self._catalogue_lock:
            if not self._catalogue:
                from pipeline.model.registry import resolve
                from views.request.session import model_label
                from views.server.state import default_weights, get_model, offered_models

                made: dict[str, ModelInfo] = {}
                for key in offered_models()[0]:
                    spec = resolve(key)
                    dims = get_model(key).config_dims
                    info = ModelInfo(key, model_label(spec), dims.V, dims.context_window, default_weights())
                    for name in (key, info.label, key.lower(), info.label.lower()):
                        made.setdefault(name, info)
                self._catalogue.update(made)
        return self._catalogue

    @staticmethod
    def max_prompt_tokens() -> int:
        from views.server.state import APP_MAX_PROMPT_TOKENS

        return APP_MAX_PROMPT_TOKENS

    @staticmethod
    def bind_address() -> str | None:
        from streamlit import config

        return config.get_option("server.address")

    @staticmethod
    def run_link(base: str, request: ChatRequest, model: ModelInfo, schema: str | None = None) -> str:
        """The link that opens this request on the app's pages (a short link: views/links/url_state.py reads it); a
        request decoded under a schema opens on Constrained output with the schema filled in."""
        from pipeline.server.room import room_store
        from views.links.controls import link_name
        from views.links.url_state import REQUEST

        history = "\n".join(f"{r}: {c}" for r, c in request.messages
                            if r != "system" and (r, c) != request.messages[-1])
        o = request.options
        values = {"req_model": model.key, "req_prompt_format": request.prompt_format, "req_weights": request.weights,
                  "req_question": request.messages[-1][1], "req_system": request.system or "",
                  "req_history": history, "req_stop": "|".join(o.stop), "req_logit_bias": logit_bias_text(o.logit_bias),
                  **{f"req_{name}": getattr(o, name) for name in (
                      "max_new_tokens", "temperature", "top_k", "top_p", "min_p", "seed", "repetition_penalty",
                      "presence_penalty", "frequency_penalty")}}
        query = {name: p.show(values[p.key]) for name, p in REQUEST.items()}
        page = "journey"
        if schema is not None:
            page, query = "constrained", {**query, link_name("co_kind"): "json_schema",
                                          link_name("co_spec_json_schema"): schema}
        code = room_store().put_link(query)
        return f"{base}/{page}?link={code}" if code else f"{base}/{page}"

    def submit_trace(self, request: ChatRequest):
        """The request as a page runs it (views.server.waiting.run_through_queue): captured, stored where every page
        finds it."""
        from pipeline.run.trace import run_trace
        from views.request.session import request_key
        from views.server.state import APP_MAX_PROMPT_TOKENS, get_model, run_queue, run_store

        key, lm = request_key(request), get_model(request.model, request.weights)
        work = lambda: run_store().get_or_run(key, lambda: run_trace(request, lm, APP_MAX_PROMPT_TOKENS))  # noqa: E731
        return _submitted(lambda: run_queue().submit(key, work, batch=("trace", (key, request, time.perf_counter()))))

    def submit_constrained(self, request: ChatRequest, model: ModelInfo, schema: str):
        """The request decoded under a JSON schema, as Constrained output runs it and where that page finds it."""
        from pipeline.run.trace import run_constrained_trace
        from pipeline.server.run_queue import cost_of
        from views.request.session import request_key
        from views.server.state import APP_MAX_PROMPT_TOKENS, get_model, result_store, run_queue, using_model

        key = (model.key, model.weights, "constrained", request_key(request), "json_schema", schema)

        def work():
            with using_model(model.key, model.weights):
                return result_store().get_or_run(key, lambda: run_constrained_trace(
                    request, get_model(), "json_schema", schema, APP_MAX_PROMPT_TOKENS))
        return _submitted(lambda: run_queue().submit(key, work, cost_of(100, request.options.max_new_tokens)))

    @staticmethod
    def submit_stream(request: ChatRequest, push):
        """The request on the plain path (the live answer's), its events pushed as they are made."""
        from views.server.state import run_queue

        return _submitted(lambda: run_queue().submit(("api", id(push)), lambda: None,
                                                     batch=("api", (request, push))))

    @staticmethod
    def end_stream(push) -> None:
        """A client left: its answer ends at the batch's next step (its slot and K/V freed), or at its first token
        if it is still waiting in line."""
        from views.server.state import run_queue

        for _, row, _ in list(run_queue().engines["api"].started.values()):
            if row.answer.on_event is push:
                row.answer.end(FinishReason.LENGTH)

    @staticmethod
    def stream_prompt_tokens(request: ChatRequest, push) -> int:
        """How many tokens the plain path's prompt of `request` has (an Anthropic stream's first event says)."""
        from views.server.state import run_queue

        return run_queue().engines["api"].prompt_tokens((request, push))

    @staticmethod
    def tokenizer(model: ModelInfo):
        from views.server.state import get_model

        return get_model(model.key, model.weights).tokenizer

    @staticmethod
    def block_size() -> int:
        """The block size of the prefix cache the queue's engines reuse K/V from, as this server configured it."""
        from views.server.state import server_reuse

        return server_reuse().config.block_size  # the server's queue always has one (pipeline.server.wiring)


def _submitted(submit):
    from pipeline.server.run_queue import LONG_QUEUE
    from views.server.state import run_queue

    try:
        return submit()
    except InputError as e:
        if len(run_queue()) >= LONG_QUEUE:  # the queue refuses a long prompt while it is long: come back later
            raise ApiError(429, e.message, "messages", retry_after_s=QUEUE_LONG_RETRY_S) from None
        raise from_input_error(e) from None
