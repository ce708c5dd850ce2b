"""Stage: generation. The decode loop chooses one token at a time, reusing the KV cache, and streams
the answer as text_delta events that never need taking back. One loop (`stream_answer`) serves the
captured path (HF's forward, every step recorded) and the plain one (pipeline.faster.fast_path).

Shape letters: S decode steps, V vocabulary, L layers.
"""
from __future__ import annotations

import time
from typing import Callable, Iterator, Protocol, Sequence

import numpy as np
import torch

from pipeline.core.maths import top_indices
from pipeline.model.decoders.protocol import CacheDecoder, Decoder, RecordingDecoder
from pipeline.model.interface import LanguageModel
from pipeline.model.kv_tensors import bytes_per_layer, cache_len
from pipeline.stages.decode_record import Candidate, Decode, EventKind, FinishReason, Step, StreamEvent
from pipeline.stages.next_token import draw, filter_stages, softmax
from pipeline.stages.request import GenerationOptions
from pipeline.text.stream_detokenizer import StreamDetokenizer
from pipeline.text.token_names import token_text, tokens_text

TOP_CANDIDATES = 10  # candidates recorded per step


def end_token_ids(lm: LanguageModel) -> set[int]:
    tok = lm.tokenizer
    eos = lm.model.generation_config.eos_token_id
    eos = list(eos) if isinstance(eos, (list, tuple)) else ([] if eos is None else [eos])
    return set(tok.all_special_ids) & {tok.eos_token_id, *eos}


def _candidates(tokenizer, logits: np.ndarray, probs: np.ndarray, k: int,
                raw: np.ndarray | None = None, kth: float | None = None) -> list[Candidate]:
    """The k best candidates; raw: softmax(logits) when the caller has it already; kth: the k-th best logit
    when the caller has it already (maths.top_indices)."""
    raw = softmax(logits) if raw is None else raw
    top = top_indices(logits, k, kth)
    return [Candidate(int(i), text, round(float(logits[i]), 4), float(raw[i]), float(probs[i]))
            for i, text in zip(top, tokens_text(tokenizer, top))]


def scores(logits) -> np.ndarray:
    """(V,) scores as numpy, from a tensor on any device or an array."""
    return logits.float().cpu().numpy() if isinstance(logits, torch.Tensor) else np.asarray(logits)


class Answer:
    """One request's answer as it is decoded: choosing its tokens, streaming its text as StreamEvents and,
    when `record` (the captured path), recording each step's candidates, scores and KV cache use.

    The plain path makes one with record=False: no per-step tables, and a greedy choice is one argmax
    on the model's device. Either way `stream_answer` runs it; only the decoder it steps differs.
    on_event: called with each event as it is made (e.g. by a worker thread feeding a page).
    """

    def __init__(self, lm: LanguageModel, first_logits, options: GenerationOptions, rid: str, started_at: float,
                 force: dict[int, int] | None = None, record: bool = True,
                 on_event: Callable[[StreamEvent], None] | None = None, prompt_ids: Sequence[int] | None = None):
        if prompt_ids is None and options.repetition_penalty != 1:
            raise ValueError("a repetition penalty needs the prompt's ids (prompt_ids)")
        # the repetition penalty counts the prompt's tokens too
        self.prompt_ids = np.asarray([] if prompt_ids is None else prompt_ids, dtype=np.int64)
        self.tok, self.eos, self.options, self.rid = lm.tokenizer, end_token_ids(lm), options, rid
        self.force = force or {}  # {step: token id} chosen by a person instead of the sampler
        self.record, self.on_event = record, on_event
        self.rng = np.random.default_rng(options.seed)
        self.detokenizer = StreamDetokenizer(lm.tokenizer, options.stop)
        self.steps: list[Step] = []
        self.logits_rows: list[np.ndarray] = []
        self.events: list[StreamEvent] = []  # text deltas, then the completed event once closed
        self.generated: list[int] = []
        self.step_seconds: list[float] = []
        self.logits = first_logits  # (V,) scores for the next token: a tensor or an array
        self.kth: float | None = None  # the TOP_CANDIDATES-th best of those scores, when the batch found it
        self.started_at = started_at
        self.t_prev = started_at
        self.first_at = self.last_at = 0.0
        self.finish_reason: FinishReason | None = None  # set once the answer has ended
        self.closed = False
        self.reused_positions = 0  # prompt positions whose K/V the server's prefix cache gave (not run again)

    @property
    def ttft_s(self) -> float | None:
        """Request start to the first chosen token."""
        return self.step_seconds[0] if self.step_seconds else None

    @property
    def tpot_s(self) -> float | None:
        """Mean seconds per token after the first."""
        return float(np.mean(self.step_seconds[1:])) if len(self.step_seconds) > 1 else None

    @property
    def text(self) -> str:
        return self.detokenizer.emitted

    def _pick(self, step: int, allowed: np.ndarray | None) -> tuple[int, np.ndarray | None, np.ndarray | None,
                                                                   np.ndarray | None]:
        """(token, the raw scores, the final probabilities, softmax of the raw scores when it was computed)."""
        options = self.options
        if (not self.record and options.greedy and allowed is None and not options.penalized
                and isinstance(self.logits, torch.Tensor)):
            # on the device: no copy of V scores
            return self.force.get(step, int(torch.argmax(self.logits))), None, None, None
        logits = scores(self.logits)
        if options.greedy and allowed is None and not options.penalized:
            # after temperature 0 every filter keeps the one best token: the stages are not built (0.4 ms a row)
            raw = softmax(logits)  # (V,) what filter_stages' first stage is
            token = int(np.argmax(logits))  # the first best on a tie, as next_token.tempered picks it
            probs = np.zeros_like(raw)
            probs[token] = 1.0
            return self.force.get(step, token), logits, probs, raw
        # penalties and bias on the raw scores first, then temperature and the filters (next_token.filter_stages)
        stages = filter_stages(logits if allowed is None else np.where(allowed, logits, -np.inf), options,
                               self.prompt_ids, self.generated)
        probs = stages[-1].probs  # (V,)
        token = int(np.argmax(probs)) if options.greedy else int(draw(probs, 1, self.rng)[0])
        # the sampler still draws: later steps see the same randomness
        return self.force.get(step, token), logits, probs, stages[0].probs if allowed is None else None

    def choose(self, kv_tokens: int = 0, kv_per_layer: list[int] | None = None, batch_size: int = 1,
               allowed: np.ndarray | None = None) -> int | None:
        """Pick (and, when recording, record) the next token; returns it, or None when the answer has just ended.

        allowed: (V,) bool from a grammar; the others get probability 0, the raw scores are still kept."""
        step = len(self.generated)
        token, logits, probs, raw = self._pick(step, allowed)
        now = time.perf_counter()
        self.first_at, self.last_at = self.first_at or now, now
        self.step_seconds.append(now - self.t_prev)
        self.generated.append(token)
        if self.record:
            kv_per_layer = list(kv_per_layer or [])
            self.logits_rows.append(logits.astype(np.float32))
            self.steps.append(Step(step=step, token_id=token, token_text=token_text(self.tok, token),
                                   position=kv_tokens,
                                   top=_candidates(self.tok, logits, probs, TOP_CANDIDATES, raw, self.kth),
                                   kv_cache_tokens=kv_tokens,
                                   kv_cache_bytes=sum(kv_per_layer), kv_bytes_per_layer=kv_per_layer,
                                   seconds=now - self.t_prev, batch_size=batch_size, forced=step in self.force))
        if token in self.eos:
            self.finish_reason = FinishReason.EOS
            return None
        self._send(self.detokenizer.push(token), step, now)
        if self.detokenizer.stopped:
            self.finish_reason = FinishReason.STOP
        elif step + 1 == self.options.max_new_tokens:
            self.finish_reason = FinishReason.LENGTH
        return None if self.finish_reason else token

    def fed(self, logits, kth: float | None = None) -> None:
        """The chosen token went through the model: these are the scores for the next one (kth: the
        TOP_CANDIDATES-th best of them, when the caller found it for a whole batch at once)."""
        self.logits, self.kth = logits, kth

    def end(self, reason: FinishReason) -> None:
        """End the answer here for `reason`, unless it has already ended for another."""
        self.finish_reason = self.finish_reason or reason

    def close(self) -> None:
        """Send the text held back, then the completed event (once)."""
        if self.closed:
            return
        self.closed = True
        now, last = time.perf_counter(), len(self.generated) - 1
        self._send(self.detokenizer.flush(), last, now)
        self.end(FinishReason.LENGTH)
        self._emit(StreamEvent(EventKind.COMPLETED, self.rid, last, now - self.started_at,
                               finish_reason=self.finish_reason, text=self.text, token_ids=tuple(self.generated)))

    def result(self, kv_bytes_at_end: int, kv_tokens_at_end: int) -> Decode:
        """The recorded answer (record=True only)."""
        self.close()
        return Decode(steps=self.steps, step_logits=np.stack(self.logits_rows), generated_ids=self.generated,
                      text=self.text, finish_reason=self.finish_reason,
                      events=[e for e in self.events if e.kind == EventKind.TEXT_DELTA],
                      kv_bytes_at_end=kv_bytes_at_end, kv_tokens_at_end=kv_tokens_at_end, first_token_at=self.first_at,
                      last_token_at=self.last_at)

    def _send(self, delta: str, step: int, now: float) -> None:
        if delta:
            self._emit(StreamEvent(EventKind.TEXT_DELTA, self.rid, step, now - self.started_at, delta=delta))

    def _emit(self, event: StreamEvent) -> None:
        self.events.append(event)
        if self.on_event:
            self.on_event(event)


class Constraint(Protocol):
    """A grammar the answer is decoded under (pipeline.stages.constrained)."""

    def allowed(self, answer: "Answer") -> np.ndarray:
        """(V,) bool: the tokens the grammar allows next."""

    def accept(self, token: int, ended: bool) -> bool:
        """Take the chosen token; True once the grammar is complete (the answer ends there)."""


def stream_answer(answer: Answer, decoder: Decoder | RecordingDecoder,
                  constraint: Constraint | None = None) -> Iterator[StreamEvent]:
    """The decode loop: choose a token, feed it to the decoder, until EOS, a stop string, max_new_tokens
    or a complete grammar. Yields the answer's events as they are made, the completed event last.
    A recording answer (the captured path) records the decoder's KV cache use with each step."""
    sent = len(answer.events)
    while True:
        allowed = constraint.allowed(answer) if constraint else None
        token = answer.choose(*(decoder.usage() if answer.record else (0, None)), allowed=allowed)
        if constraint and constraint.accept(answer.generated[-1], ended=token is None):
            answer.end(FinishReason.EOS)  # a complete grammar ends the answer as the end token would
            token = None
        yield from answer.events[sent:]
        sent = len(answer.events)
        if token is None:
            break
        answer.t_prev = time.perf_counter()
        answer.fed(decoder.step(token))
    answer.close()
    yield from answer.events[sent:]


def decode_loop(lm: LanguageModel, cache, first_logits: torch.Tensor, options: GenerationOptions, rid: str,
                prefill_started_at: float | None = None, force: dict[int, int] | None = None,
                prompt_ids: Sequence[int] | None = None) -> Decode:
    """The captured decode: choose, stream and feed back tokens through HF's forward over `cache`.

    Step 0's `seconds` runs from `prefill_started_at` (prefill + choosing the first token);
    every later step's from the moment the previous token was fed back. force: {step: token id}.
    prompt_ids: the prompt's ids, which the repetition penalty counts too.
    """
    answer = Answer(lm, first_logits, options, rid, prefill_started_at or time.perf_counter(), force,
                    prompt_ids=prompt_ids)
    return continue_answer(lm, cache, answer)


def continue_answer(lm: LanguageModel, cache, answer: Answer, constraint: Constraint | None = None) -> Decode:
    """Run the captured loop from the answer's current state to its end; the recorded Decode."""
    decoder = CacheDecoder(lm, cache)
    for _ in stream_answer(answer, decoder, constraint):
        pass
    return answer.result(sum(bytes_per_layer(cache)), cache_len(cache))


