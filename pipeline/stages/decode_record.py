"""What the decode loop produced, as plain records (numpy arrays only, no torch), so a stored run
unpickles and draws before the model (and torch) has loaded. Computed by pipeline.stages.generation.

Shape letters: S decode steps, V vocabulary, L layers.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum

import numpy as np


class FinishReason(StrEnum):
    """Why an answer ended. A str ("eos" == FinishReason.EOS), so the JSON reads as before."""

    EOS = "eos"  # the model chose its end token
    LENGTH = "length"  # max_new_tokens was reached
    STOP = "stop"  # a stop string appeared; the text is cut before it


class EventKind(StrEnum):
    TEXT_DELTA = "text_delta"  # new text, sent as soon as no later token can change it
    COMPLETED = "completed"  # the answer has ended


@dataclass(frozen=True)
class StreamEvent:
    """One event of an answer's stream, the same on the captured and the plain path.

    text_delta: `delta` is the new text, `step` the step whose token completed it.
    completed: `finish_reason`, the whole `text` and every chosen id (`token_ids`); `step` is the last step.
    t_s: seconds from the request's start to this event (not in the JSON, which is the API's shape).
    """

    kind: EventKind
    request_id: str
    step: int
    t_s: float
    delta: str = ""
    finish_reason: FinishReason | None = None
    text: str = ""
    token_ids: tuple[int, ...] = ()

    def to_json(self) -> dict:
        """As a streaming API sends it: {"event": "text_delta", "request_id", "delta", "step"} or
        {"event": "completed", "request_id", "finish_reason", "text", "generated_token_ids"}."""
        if self.kind == EventKind.TEXT_DELTA:
            return {"event": "text_delta", "request_id": self.request_id, "delta": self.delta, "step": self.step}
        return {"event": "completed", "request_id": self.request_id, "finish_reason": self.finish_reason,
                "text": self.text, "generated_token_ids": list(self.token_ids)}


@dataclass(frozen=True)
class Candidate:
    id: int
    text: str
    logit: float
    prob: float  # softmax over V at temperature 1
    prob_after_filters: float  # what the run really drew from


@dataclass
class Step:
    step: int
    token_id: int
    token_text: str
    position: int  # where the chosen token will sit in the sequence
    top: list[Candidate]
    kv_cache_tokens: int
    kv_cache_bytes: int
    kv_bytes_per_layer: list[int]  # (L,)
    seconds: float  # step 0: prefill + choosing; later steps: one decode pass + choosing
    batch_size: int = 1  # requests decoded together in the pass that produced this step's scores
    forced: bool = False  # a person chose this token (branch / --force), not the sampler

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Decode:
    """Everything the decode loop produced for one request."""

    steps: list[Step]
    step_logits: np.ndarray  # (S, V) the scores each token was chosen from
    generated_ids: list[int]  # every chosen id, the end token included when the model chose it
    text: str
    finish_reason: FinishReason
    events: list[StreamEvent]  # the text_delta events (the trace adds the completed event, with usage)
    kv_bytes_at_end: int
    kv_tokens_at_end: int
    first_token_at: float = 0.0  # perf_counter timestamp of the first chosen token
    last_token_at: float = 0.0  # ... and of the last (0.0 in runs stored before it was kept)

    @property
    def step_seconds(self) -> list[float]:
        return [s.seconds for s in self.steps]


def silent_steps(n_steps: int, events: list[dict], pieces, finish_reason: FinishReason) -> dict[str, list[int]]:
    """Why there are fewer text_delta events than answer tokens: the steps that sent no text, by reason.

    pieces: the answer's tokens placed in their characters (pipeline.text.pieces.token_pieces).
    {'end': [last step] if the model chose its end token, 'character': steps whose token is part of a
    character still being spelled, 'other': the rest (held back while it could begin a stop string,
    or text the next token completed)}.  Korean '토' as 3 tokens then the end token ->
    {'end': [3], 'character': [0, 1], 'other': []}.
    """
    sent = {e["step"] for e in events if e.get("event", "text_delta") == "text_delta"}
    out: dict[str, list[int]] = {"end": [], "character": [], "other": []}
    for s in range(n_steps):
        if s in sent:
            continue
        if finish_reason == "eos" and s == n_steps - 1:
            out["end"].append(s)
        elif s < len(pieces) and pieces[s].partial and pieces[s].part < pieces[s].parts:
            out["character"].append(s)
        else:
            out["other"].append(s)
    return out
