"""The app's server: the pages (app.py) and the OpenAI- and Anthropic-compatible API (/v1/...) on one port, in one
process, so an API request shares the model, the run queue and the store of runs with the pages.

Started by `./run.sh` (`streamlit run server.py`); `streamlit run app.py` serves the pages alone. The API's plain
logic (parsing, checks, the bodies each SDK reads) is pipeline/api/, its handlers pipeline/api/serving/; what they
ask of the server (its models, queue and stores) is views/server/api_runs.py; this module only routes. docs/api.md
lists every field.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading

from pipeline.server.process import give_freed_arrays_back, quiet_library_noise, wait_passively

wait_passively()  # before torch loads (an API request may load it before any page does)
quiet_library_noise()
give_freed_arrays_back()

import streamlit as st  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

from pipeline.api.serving.handlers import ApiHandlers  # noqa: E402
from views.server.api_runs import QueueRuns  # noqa: E402

# st.cache_resource (the model handles, the queue, the stores) read from the API's threads, which run no page: fine
logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").setLevel(logging.ERROR)
api = ApiHandlers(QueueRuns())


async def chat_completions(request: Request) -> Response:
    return await api.answer(request, anthropic=False)


async def messages(request: Request) -> Response:
    return await api.answer(request, anthropic=True)


ROUTES = [Route("/v1/chat/completions", chat_completions, methods=["POST"]),
          Route("/v1/messages", messages, methods=["POST"]),
          Route("/v1/models", api.models, methods=["GET"]),
          Route("/v1/models/{model:path}", api.models, methods=["GET"]),
          Route("/v1/{rest:path}", api.unknown, methods=["GET", "POST", "PUT", "PATCH", "DELETE"])]



@contextlib.asynccontextmanager
async def lifespan(_app):
    """At start: a lesson's runs queued (`./run.sh app --lesson FILE`, views/server/lesson_runs.py), in a thread: the
    model's files are read first, and the server answers meanwhile."""
    from views.server.lesson_runs import LESSON_ENV, lesson_runs

    if os.environ.get(LESSON_ENV, "").strip():
        threading.Thread(target=lesson_runs, name="lesson-start", daemon=True).start()
    yield


app = st.App("app.py", routes=ROUTES, lifespan=lifespan)
