"""One chat request followed end to end: the typed record every page and the CLI read.

A Trace is built from one record per stage (request, tokens, batch, prefill, decode); `to_json`
turns it into the JSON document (docs/cli.md lists its keys; the request bodies, `states`,
`batch` and `constraint` are held as plain dicts already).

The records hold numpy arrays and plain values only: a stored run unpickles and a page draws it
without importing torch."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from pipeline.costs.named_time import CAPTURED
from pipeline.model.dims import ModelDims
from pipeline.model.prefill_record import Prefill
from pipeline.stages.decode_record import Decode, FinishReason, Step
from pipeline.stages.request import (
    GenerationOptions,
)
from pipeline.stages.template import Segment
from pipeline.stages.tokens import Token, TokenizedRequest


@dataclass(frozen=True)
class RequestRecord:
    id: str  # req_xxxx
    openai: dict  # the body in OpenAI's style (system prompt as a message)
    anthropic: dict  # the body in Anthropic's style (system prompt as a top-level field)
    options: GenerationOptions
    states: list[dict]  # [{state, t_s}] queued -> prefill -> decoding -> completed

    @property
    def messages(self) -> tuple[tuple[str, str], ...]:
        """The conversation as (role, content) pairs."""
        return tuple((m["role"], m["content"]) for m in self.openai["messages"])

    def to_json(self) -> dict:
        return {"id": self.id, "openai": self.openai, "anthropic": self.anthropic,
                "options": self.options.to_dict(), "states": self.states}


@dataclass(frozen=True)
class Timings:
    """The run's times (pipeline.costs.named_time.served_times: the one definition of TTFT and TPOT) and what ran
    it. Served by the server: the queue's clock, arrival in its line -> the end of the step that made the token;
    a run made on its own (`python -m pipeline trace`): its own clock from the request's check. Runs stored before
    the paths were recorded load with the defaults: captured prefill, captured decode steps, device unknown."""

    ttft_s: float  # arrival -> first token
    tpot_s: float | None  # mean gap between tokens after the first (None with one token)
    prefill_s: float  # the prompt's forward pass alone
    total_s: float  # arrival -> last token
    prefill_path: str = CAPTURED  # the path that ran its prefill (pipeline.costs.named_time), which TTFT is named by
    decode_path: str = CAPTURED  # the path that ran its decode steps, which TPOT is named by
    device: str | None = None  # as pipeline.costs.ceilings.device_name names it


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.total_tokens}


@dataclass(frozen=True)
class Cleanup:
    kv_bytes_released: int
    kv_tokens_released: int  # prompt + every chosen token except the last, which is never fed back


@dataclass
class Trace:
    request: RequestRecord
    tokenized: TokenizedRequest
    dims: ModelDims
    batch: dict  # {"single": {name: {values, shape, dtype}}, "entry": {...}}
    prefill: Prefill
    decode: Decode
    timings: Timings
    usage: Usage
    cleanup: Cleanup
    constraint: dict | None = None  # {kind, spec, steps: [MaskStep]} when decoded under a grammar
    # prompt positions whose K/V the server's prefix cache gave, not run again (their captures kept with the blocks;
    # pipeline.prompt_cache.reuse); 0: all computed. The API reports it as cached_tokens
    reused_positions: int = 0

    # ---- shortcuts the pages read ---------------------------------------------------------------
    @property
    def prompt_text(self) -> str:
        return self.tokenized.prompt_text

    @property
    def segments(self) -> list[Segment]:
        return self.tokenized.segments

    @property
    def tokens(self) -> list[Token]:
        return self.tokenized.tokens

    @property
    def naive_tokens(self) -> list[Token]:
        return self.tokenized.naive_tokens

    @property
    def ids(self) -> list[int]:
        return self.tokenized.ids

    @property
    def steps(self) -> list[Step]:
        return self.decode.steps

    @property
    def step_logits(self) -> np.ndarray:
        return self.decode.step_logits  # (S, V)

    @property
    def generated_token_ids(self) -> list[int]:
        return self.decode.generated_ids

    @property
    def text(self) -> str:
        return self.decode.text

    @property
    def finish_reason(self) -> FinishReason:
        return self.decode.finish_reason

    @property
    def events(self) -> list[dict]:
        """text_delta events, then the completed event, as JSON (the shape a streaming API sends)."""
        return [e.to_json() for e in self.decode.events] + [{
            "event": "completed", "request_id": self.request.id, "finish_reason": self.finish_reason,
            "text": self.text, "generated_token_ids": self.generated_token_ids, "usage": self.usage.to_json(),
        }]

    @property
    def nbytes(self) -> int:
        """Memory the captured arrays hold (what a store of runs must budget for)."""
        return self.prefill.nbytes + self.decode.step_logits.nbytes

    def tensors(self) -> dict[str, np.ndarray]:
        return {**self.prefill.tensors(), "step_logits": self.step_logits}

    def to_json(self, include_tensors: bool = False) -> dict:
        out = {
            "request": self.request.to_json(),
            "prompt_text": self.prompt_text,
            "segments": [s.to_json() for s in self.segments],
            "tokens": [t.to_json() for t in self.tokens],
            "naive_tokens": [t.to_json() for t in self.naive_tokens],
            "model": self.dims.to_json(),
            "batch": self.batch,
            "prefill": {
                "seconds": self.prefill.seconds,
                "kv_bytes_per_layer": self.prefill.kv_bytes_per_layer,
                "shapes": {k: list(v.shape) for k, v in self.tensors().items()},
                "first_token_top": self.steps[0].to_json()["top"] if self.steps else [],
            },
            "steps": [s.to_json() for s in self.steps],
            "generated_token_ids": self.generated_token_ids,
            "text": self.text,
            "finish_reason": self.finish_reason,
            "timings": asdict(self.timings),  # a stored run's defaults too
            "events": self.events,
            "usage": self.usage.to_json(),
            "reused_positions": self.reused_positions,
            "cleanup": self.cleanup.__dict__.copy(),
        }
        if self.constraint is not None:
            out["constraint"] = {"kind": self.constraint["kind"], "spec": self.constraint["spec"],
                                 "steps": [s.__dict__ for s in self.constraint["steps"]]}
        if include_tensors:
            out["tensors"] = {k: v.tolist() for k, v in self.tensors().items()}
        return out
