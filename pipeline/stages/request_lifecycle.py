"""A request's life once it is accepted: its id, its states (queued -> prefill -> decoding -> completed) stamped
with the clock, and the check, before any forward pass, that its prompt fits the window."""
from __future__ import annotations

import hashlib
import time
from enum import StrEnum

from pipeline.core.errors import InputError
from pipeline.model.dims import ModelDims
from pipeline.stages.request import ChatRequest


class RequestStatus(StrEnum):
    """Where a request is in its life, in order (as vLLM's RequestStatus). A str: "queued" == QUEUED."""

    QUEUED = "queued"
    PREFILL = "prefill"
    DECODING = "decoding"
    COMPLETED = "completed"


STATES = tuple(RequestStatus)


def request_id(request: ChatRequest, started_at: float) -> str:
    """A short id in the style of the seed article (`req_7f3a`), unique per run."""
    digest = hashlib.sha1(f"{request!r}{started_at}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"req_{digest[:4]}"


class RequestState:
    """queued -> prefill -> decoding -> completed, each change stamped with the clock."""

    def __init__(self, rid: str, clock=time.perf_counter):
        self.id = rid
        self._clock = clock
        self._t0 = clock()
        self.history: list[dict] = [{"state": RequestStatus.QUEUED, "t_s": 0.0}]

    @property
    def state(self) -> RequestStatus:
        return self.history[-1]["state"]

    def advance(self, state: RequestStatus | str) -> None:
        if state not in STATES:
            raise RuntimeError(f"request {self.id}: {state!r} is not a state (one of {', '.join(STATES)})")
        state = RequestStatus(state)
        if STATES.index(state) != STATES.index(self.state) + 1:
            raise RuntimeError(f"request {self.id}: cannot go from {self.state} to {state}")
        self.history.append({"state": state, "t_s": round(self._clock() - self._t0, 6)})


def check_fits(dims: ModelDims, n_prompt: int, max_new_tokens: int, max_prompt_tokens: int | None = None) -> None:
    """Refuse, before any forward pass, a prompt that does not fit the window (or a server's own cap).

    Both paths (pipeline.run.trace and pipeline.faster.fast_path) call it once the prompt is tokenized."""
    if max_prompt_tokens is not None and n_prompt > max_prompt_tokens:
        raise InputError("messages", f"the prompt is {n_prompt:,} tokens; this shared server runs prompts of up to "
                                     f"{max_prompt_tokens:,} tokens so that one request cannot hold the model for "
                                     f"everyone (the command line takes the full {dims.context_window:,}).")
    window = dims.context_window
    if n_prompt >= window:
        raise InputError("messages", f"the prompt is {n_prompt:,} tokens but the context window is {window:,}; "
                                     "shorten the conversation.")
    if n_prompt + max_new_tokens > window:
        raise InputError("max_new_tokens", f"{n_prompt:,} prompt tokens + {max_new_tokens:,} new tokens exceed the "
                                           f"{window:,}-token context window; at most {window - n_prompt:,} fit.")
