"""What the decode loop produced, as plain records (numpy arrays only, no torch), so a stored run
unpickles and draws before the model (and torch) has loaded. Computed by pipeline.stages.generation.

Shape letters: S decode steps, V vocabulary, L layers.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


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
    finish_reason: str  # eos | length | stop
    events: list[dict]  # text_delta events (the completed event is added by the trace)
    kv_bytes_at_end: int
    kv_tokens_at_end: int
    first_token_at: float = 0.0  # perf_counter timestamp of the first chosen token

    @property
    def step_seconds(self) -> list[float]:
        return [s.seconds for s in self.steps]


def silent_steps(n_steps: int, events: list[dict], pieces, finish_reason: str) -> dict[str, list[int]]:
    """Why there are fewer text_delta events than answer tokens: the steps that sent no text, by reason.

    pieces: the answer's tokens placed in their characters (pipeline.text.token_pieces).
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
