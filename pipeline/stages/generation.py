"""Stage: generation. The decode loop chooses one token at a time, reusing the KV cache, and streams
the answer as text_delta events that never need taking back. One loop (`stream_answer`) serves the
captured path (HF's forward, every step recorded) and the plain one (pipeline.stages.fast_path).

Shape letters: S decode steps, V vocabulary, L layers.
"""
from __future__ import annotations

import time
from typing import Callable, Iterator, Protocol, Sequence

import numpy as np
import torch

from ..maths import top_indices
from ..model.kv_tensors import bytes_per_layer, cache_layers, cache_len, cache_with_room, place_rows, room_left
from ..model.passes import current_counter, passes_for
from ..text.token_names import token_text, tokens_text
from ..text.unfinished import unfinished_end
from .next_token import draw, filter_stages, softmax
from .decode_record import Candidate, Decode, EventKind, FinishReason, Step, StreamEvent
from .request import GenerationOptions
from ..model.interface import LanguageModel

TOP_CANDIDATES = 10  # candidates recorded per step
SPARE_POSITIONS = 64  # a batch's new cache has room for this many positions more than its rows may add ...
SPARE_ROWS = 4  # ... and for this many rows more (at least; half its rows), so most joins and leaves are in place
DETOKENIZE_CONTEXT = 6  # earlier tokens re-decoded with each new one, so merges across tokens come out right


class StreamDetokenizer:
    """Turns ids into text deltas that never need taking back, in time linear in the answer.

    Each new token is decoded together with a few tokens before it (merges across tokens and
    multi-byte characters come out right without decoding the whole answer again). Held back
    until the next token decides: a partial UTF-8 character, and any tail that could be the start
    of a stop string (stop " to this": "The answer to" is sent as "The answer").
    """

    def __init__(self, tokenizer, stop: tuple[str, ...] = ()):
        self.tokenizer = tokenizer
        self.stop = tuple(stop)
        self.longest_stop = max((len(s) for s in self.stop), default=0)
        self.ids: list[int] = []
        self.prefix_offset = 0  # ids[prefix_offset:read_offset] are decoded again as context
        self.read_offset = 0  # ids before this are in `text`
        self.text = ""  # everything decoded so far (cut at a stop string once one appears)
        self.emitted = ""
        self.stopped = False
        self.cut_bytes = b""  # an unfinished character's bytes the answer ended on (see flush)

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        added = self._decode_new()
        if added is None:
            return ""  # wait for the rest of a multi-byte character
        if self._add(added):
            return self._emit(self.text)
        return self._emit(self.text[:len(self.text) - self._stop_prefix_len()])

    def flush(self) -> str:
        """At the end of generation: send whatever was held back, except a character left unfinished
        (the answer was cut between its bytes): it is never sent, as mid-answer, so the text never ends
        in U+FFFD. Its bytes stay in `cut_bytes` (b'' if the answer ended on a whole character)."""
        if not self.stopped and self.read_offset < len(self.ids):
            added = self._decode_new(final=True)
            self.cut_bytes = unfinished_end(self.tokenizer, self.ids)
            replaced = len(self.cut_bytes.decode("utf-8", errors="replace"))  # U+FFFD the decoder made of them
            if self.cut_bytes and added.endswith("\ufffd" * replaced):
                added = added[:len(added) - replaced]
            self._add(added)
        return self._emit(self.text)

    def _add(self, added: str) -> bool:
        """Append newly decoded text; cut it at the first stop string. True once stopped."""
        searched_from = max(0, len(self.text) - self.longest_stop + 1)
        self.text += added
        cut = min((i for i in (self.text.find(s, searched_from) for s in self.stop) if i >= 0), default=-1)
        if cut >= 0:
            self.text, self.stopped = self.text[:cut], True
        return self.stopped

    def _decode_new(self, final: bool = False) -> str | None:
        decode = lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
        before = decode(self.ids[self.prefix_offset:self.read_offset])
        now = decode(self.ids[self.prefix_offset:])
        if not final and (now.endswith("\ufffd") or len(now) < len(before)):
            return None
        self.prefix_offset = max(self.read_offset, len(self.ids) - DETOKENIZE_CONTEXT)
        self.read_offset = len(self.ids)
        return now[len(before):]

    def _stop_prefix_len(self) -> int:
        """Length of the longest tail of the text that a stop string starts with (< that stop's length)."""
        best = 0
        for s in self.stop:
            tail = self.text[-(len(s) - 1):] if len(s) > 1 else ""
            for i in range(len(tail)):  # at most len(s) - 1 starts, each a C-level comparison
                if s.startswith(tail[i:]):
                    best = max(best, len(tail) - i)
                    break
        return best

    def _emit(self, upto: str) -> str:
        delta = upto[len(self.emitted):]
        self.emitted = upto
        return delta


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
        self.first_at = 0.0
        self.finish_reason: FinishReason | None = None  # set once the answer has ended
        self.closed = False

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
        self.first_at = self.first_at or now
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
                      kv_bytes_at_end=kv_bytes_at_end, kv_tokens_at_end=kv_tokens_at_end, first_token_at=self.first_at)

    def _send(self, delta: str, step: int, now: float) -> None:
        if delta:
            self._emit(StreamEvent(EventKind.TEXT_DELTA, self.rid, step, now - self.started_at, delta=delta))

    def _emit(self, event: StreamEvent) -> None:
        self.events.append(event)
        if self.on_event:
            self.on_event(event)


class Decoder(Protocol):
    """What the decode loop steps: one chosen token in, the (V,) scores for the next one out.
    The plain path's decoders (pipeline.model.plain_decoder) are this alone."""

    def step(self, token: int) -> torch.Tensor: ...


class RecordingDecoder(Decoder, Protocol):
    """A decoder whose KV cache use is recorded with each step (an Answer with record=True needs one)."""

    def usage(self) -> tuple[int, list[int]]:
        """(positions the KV cache holds, its bytes per layer (L,))."""


class CacheDecoder:
    """The captured path's decoder: HF's forward pass over a KV cache (hooks and all)."""

    def __init__(self, lm: LanguageModel, kv_cache):
        self.lm, self.kv_cache = lm, kv_cache

    def step(self, token: int) -> torch.Tensor:
        return self.lm.forward([[token]], cache=self.kv_cache).logits[0, -1]  # (1, 1) in: only the new token

    def usage(self) -> tuple[int, list[int]]:
        """(positions held, bytes per layer) of the KV cache."""
        return cache_len(self.kv_cache), bytes_per_layer(self.kv_cache)


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


class BatchRow:
    """One answer in a BatchDecoder: its own cache's real positions, or a decoder of its own (`solo`)."""

    def __init__(self, answer: Answer, length: int, per_position: list[int], decoder=None):
        self.answer, self.length, self.per_position, self.decoder = answer, length, per_position, decoder
        self.counter = current_counter()  # whose passes its steps are (the caller that joined it)
        self.ended = False
        self._kv_at_end: tuple[int, int] | None = None  # (bytes, positions) it held when it ended
        self._decode: Decode | None = None

    def end(self) -> None:
        """The answer has ended: its completed event is sent now (the stream's order) and what it held noted."""
        kv_tokens, kv_bytes = self.usage()
        self._kv_at_end = (sum(kv_bytes), kv_tokens)
        self.answer.close()
        self.ended = True

    @property
    def result(self) -> Decode | Answer | None:
        """Once ended: the Decode (recorded; assembled when first asked for, which may be on a thread that
        finishes runs away from the decode loop: stacking its step scores is ~30 ms) or the Answer."""
        if not self.ended:
            return None
        if not self.answer.record:
            return self.answer
        if self._decode is None:
            self._decode = self.answer.result(*self._kv_at_end)
        return self._decode

    def usage(self) -> tuple[int, list[int]]:
        """(positions it holds, its bytes per layer): its own, never the batch's padding."""
        if isinstance(self.decoder, CacheDecoder):
            return self.decoder.usage()
        return self.length, [b * self.length for b in self.per_position]


class BatchDecoder:
    """Answers decoded together, one forward pass per step for all of them, as servers do; an answer may
    join before any step and leaves at its own end (continuous batching: pipeline.run_queue steps it).

    Each answer keeps its own options, random generator and stream. Their KV caches are joined into one
    batch, left-padded to the longest (B, Hkv, T, Dh) with an attention mask that hides the padding; each
    row continues at its own position. The answers that joined since the last step and the rows that left
    in it are merged together at the step (`_merge`): in place when the cache has room (only those rows
    copied), else into a new cache, each position copied once, where the padding every row has in common is
    cut. Each step writes its new position into the cache's room (kv_tensors.cache_with_room).
    A cache that cannot be padded into the batch is decoded on its own (`solo`), in the same step: a
    plain-path decoder, or a cache whose sliding-window layer (Gemma 3) keeps fewer positions than the
    request holds or would before the answer ends (padded rows past a window would shift it), so every
    answer is the one it would be alone, up to the batch's rounding.
    """

    def __init__(self, lm: LanguageModel):
        self.lm = lm
        self.rows: list[BatchRow] = []  # in the joined cache's row order
        self.joining: list[tuple[BatchRow, list]] = []  # joined since the last step: (row, its cache's layers)
        self.solo: list[BatchRow] = []
        self.cache, self.mask = None, None  # the joined DynamicCache and its (B, T) mask, 1 = real
        windows = [w for w in (lm.dims.window(i) for i in range(lm.dims.L)) if w]
        self.window = min(windows) if windows else None

    def __len__(self) -> int:
        return len(self.rows) + len(self.joining) + len(self.solo)

    def join(self, answer: Answer, cache=None, decoder: Decoder | None = None) -> BatchRow:
        """Add an answer after its prefill: its HF cache (joined into the batch when it can be) or a decoder
        of its own. It chooses its next token at the next step (where its cache is merged into the batch)."""
        if decoder is not None:
            row = BatchRow(answer, 0, [], decoder)
            self.solo.append(row)
            return row
        n = cache_len(cache)
        per_position = [b // max(n, 1) for b in bytes_per_layer(cache)]  # bytes one position holds, per layer
        batched = self.rows + [r for r, _ in self.joining]
        width = [self.mask.shape[1]] if self.mask is not None else []  # with the padding a merge in place keeps
        T = max([n] + [r.length for r in batched] + width)  # the joined cache's length once it is in
        left = answer.options.max_new_tokens - len(answer.generated)
        longest = max([left] + [r.answer.options.max_new_tokens - len(r.answer.generated) for r in batched])
        cropped = any(k.shape[2] != n for k, _ in cache_layers(cache))
        if cropped or (self.window is not None and T + longest >= self.window - 1):
            row = BatchRow(answer, n, per_position, CacheDecoder(self.lm, cache))
            self.solo.append(row)
            return row
        row = BatchRow(answer, n, per_position)
        self.joining.append((row, cache_layers(cache)))
        return row

    def step(self) -> list[BatchRow]:
        """Every answer chooses its next token; those that ended leave (`ended`, their `result` ready, returned);
        the others' tokens go through the model: one pass for the joined rows, one each for the solo ones."""
        size, ended, tokens = len(self), [], {}
        for row in self.rows + [r for r, _ in self.joining] + self.solo:
            answer = row.answer
            token = answer.choose(*(row.usage() if answer.record else (0, None)), batch_size=size)
            if token is None:
                row.end()
                ended.append(row)
            else:
                tokens[id(row)] = token
        self.solo = [r for r in self.solo if not r.ended]
        if self.joining or any(r.ended for r in self.rows):
            self._merge([i for i, r in enumerate(self.rows) if not r.ended],
                        [(r, layers) for r, layers in self.joining if not r.ended])
        t_fed = time.perf_counter()
        if self.rows:
            self.mask = torch.cat([self.mask, torch.ones((len(self.rows), 1), dtype=self.mask.dtype,
                                                         device=self.mask.device)], dim=1)
            positions = torch.tensor([[r.length] for r in self.rows],  # (B, 1) each row's own next position
                                     device=self.mask.device)
            for r in self.rows:
                r.answer.t_prev = t_fed
                r.length += 1
            with passes_for([r.counter for r in self.rows]):  # one pass for every row's caller
                out = self.lm.forward([[tokens[id(r)]] for r in self.rows], cache=self.cache,
                                      attention_mask=self.mask, position_ids=positions)
            last = out.logits[:, -1].float()  # (B, V)
            logits = last.cpu().numpy()
            kth = [None] * len(self.rows)
            if any(r.answer.record for r in self.rows):  # every row's k-th best score in one pass: 1.1 ms for
                # 28 rows, where a partition per row (maths.top_indices) takes 0.28 ms each
                kth = torch.topk(last, min(TOP_CANDIDATES, last.shape[1]), dim=-1).values[:, -1].tolist()
            for i, r in enumerate(self.rows):
                r.answer.fed(logits[i], kth[i])
        for r in self.solo:
            r.answer.t_prev = time.perf_counter()
            with passes_for([r.counter]):  # its own pass
                r.answer.fed(r.decoder.step(tokens[id(r)]))
            r.length += 1
        return ended

    def _merge(self, keep: list[int], joining: list[tuple[BatchRow, list]]) -> None:
        """The joined cache of rows `keep` then the `joining` ones. In place when the cache has room for them
        (the rows that left are filled by the last rows, the joiners written into spare rows: only those rows
        copied); else one new cache left-padded to the longest row (the padding every row had in common cut),
        each position copied once, with room for every position the rows may still add and for more rows."""
        self.joining = []
        kept = [self.rows[i] for i in keep]
        rows = kept + [r for r, _ in joining]
        if not rows:
            self.rows, self.cache, self.mask = [], None, None
            return
        room = 1 + max(r.answer.options.max_new_tokens - len(r.answer.generated) for r in rows)
        spare_rows, spare_positions = room_left(self.cache) if kept else (0, 0)
        T = self.mask.shape[1] if kept else 0
        if (kept and len(rows) - len(self.rows) <= spare_rows and spare_positions >= room
                and all(r.length <= T for r, _ in joining)):
            holes = [i for i in range(len(kept)) if i not in set(keep)]
            moves = list(zip([i for i in keep if i >= len(kept)], holes))  # the last rows fill the holes
            order = list(range(len(kept)))
            for src, dst in moves:
                order[dst] = src
            self.rows = [self.rows[i] for i in order] + [r for r, _ in joining]
            place_rows(self.cache, moves, len(self.rows))
            self._write_joiners(len(kept), joining, T)
        else:
            self.rows, T = rows, max(r.length for r in rows)  # every row's own positions are its last `length`
            old = cache_layers(self.cache) if kept else []
            every = keep == list(range(len(old[0][0]))) if kept else True  # no row left: copied as they are
            index = slice(None) if every else torch.tensor(keep, device=self.mask.device)
            parts = old if kept else joining[0][1]  # any part, for the shapes: (B', Hkv, t, Dh) per layer
            self.cache = cache_with_room([(len(rows), k.shape[1], T, k.shape[3]) for k, _ in parts], parts[0][0],
                                         self.lm.config, room + SPARE_POSITIONS, max(SPARE_ROWS, len(rows) // 2))
            for (k_new, v_new), (k, v) in zip(cache_layers(self.cache), old):
                w = min(k.shape[2], T)  # the old positions still needed
                k_new[:len(kept), :, :T - w], v_new[:len(kept), :, :T - w] = 0, 0
                k_new[:len(kept), :, T - w:] = k[index, :, k.shape[2] - w:]
                v_new[:len(kept), :, T - w:] = v[index, :, v.shape[2] - w:]
            self._write_joiners(len(kept), joining, T)
        mask = torch.zeros((len(self.rows), T), dtype=torch.long, device=self.lm.device)
        for i, r in enumerate(self.rows):
            mask[i, T - r.length:] = 1
        self.mask = mask

    def _write_joiners(self, first: int, joining: list[tuple[BatchRow, list]], T: int) -> None:
        """The joiners' own caches into rows first, first + 1, ... of the joined cache (T positions wide)."""
        for li, (k_new, v_new) in enumerate(cache_layers(self.cache)):
            for j, (row, own) in enumerate(joining, start=first):
                pad = T - row.length
                k_new[j, :, :pad], v_new[j, :, :pad] = 0, 0  # the padding: zeros, and hidden by the mask
                k_new[j, :, pad:], v_new[j, :, pad:] = own[li][0][0], own[li][1][0]


def decode_batch(lm: LanguageModel, caches: list, first_logits: list[torch.Tensor], options: list[GenerationOptions],
                 rids: list[str], started_at: list[float],
                 prompt_ids: list[Sequence[int]] | None = None) -> list[Decode]:
    """Several requests decoded together from the start (a static batch): a BatchDecoder stepped to its end.
    The bytes recorded per request are its own rows' (real positions, not padding).
    prompt_ids: each request's prompt ids (for its repetition penalty)."""
    batch = BatchDecoder(lm)
    prompts = prompt_ids or [None] * len(rids)
    rows = [batch.join(Answer(lm, lg, o, r, t, prompt_ids=ids), c)
            for c, lg, o, r, t, ids in zip(caches, first_logits, options, rids, started_at, prompts)]
    while len(batch):
        batch.step()
    return [row.result for row in rows]
