"""The request as a vendor API would receive it, and its lifecycle."""
from __future__ import annotations

import hashlib
import time

from .options import ChatRequest

STATES = ("queued", "prefill", "decoding", "completed")


def request_id(request: ChatRequest, started_at: float) -> str:
    """A short id in the style of the seed article (`req_7f3a`), unique per run."""
    digest = hashlib.sha1(f"{request!r}{started_at}".encode()).hexdigest()
    return f"req_{digest[:4]}"


def openai_style(request: ChatRequest) -> dict:
    """OpenAI-style body: the system prompt is a message with the system role."""
    o = request.options
    body = {
        "model": request.model,
        "messages": [{"role": r, "content": c} for r, c in request.messages],
        "max_tokens": o.max_new_tokens,
        "temperature": o.temperature,
        "top_p": o.top_p,
        "stream": True,
    }
    if o.seed is not None:
        body["seed"] = o.seed
    if o.stop:
        body["stop"] = list(o.stop)
    return body


def anthropic_style(request: ChatRequest) -> dict:
    """Anthropic-style body: the system prompt is a top-level field, not a message."""
    o = request.options
    body = {"model": request.model, "max_tokens": o.max_new_tokens}
    if request.system is not None:
        body["system"] = request.system
    body["messages"] = [{"role": r, "content": c} for r, c in request.messages if r != "system"]
    body.update({"temperature": o.temperature, "top_p": o.top_p, "stream": True})
    if o.top_k:
        body["top_k"] = o.top_k
    if o.stop:
        body["stop_sequences"] = list(o.stop)
    return body


class RequestState:
    """queued -> prefill -> decoding -> completed, each change stamped with the clock."""

    def __init__(self, rid: str, clock=time.perf_counter):
        self.id = rid
        self._clock = clock
        self._t0 = clock()
        self.history: list[dict] = [{"state": "queued", "t_s": 0.0}]

    @property
    def state(self) -> str:
        return self.history[-1]["state"]

    def advance(self, state: str) -> None:
        if STATES.index(state) != STATES.index(self.state) + 1:
            raise RuntimeError(f"request {self.id}: cannot go from {self.state} to {state}")
        self.history.append({"state": state, "t_s": round(self._clock() - self._t0, 6)})
