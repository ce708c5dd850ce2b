"""Stage: generation. The decode loop chooses one token at a time, reusing the KV cache, and streams
the answer as text_delta events that never need taking back.

Shape letters: S decode steps, V vocabulary, L layers.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from ..model.kv_tensors import bytes_per_layer, cache_len
from ..text import token_text, tokens_text
from .next_token import draw, final_probs, softmax
from .request import GenerationOptions

TOP_CANDIDATES = 10  # candidates recorded per step
DETOKENIZE_CONTEXT = 6  # earlier tokens re-decoded with each new one, so merges across tokens come out right


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

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        added = self._decode_new()
        if added is None:
            return ""  # wait for the rest of a multi-byte character
        if self._add(added):
            return self._emit(self.text)
        return self._emit(self.text[:len(self.text) - self._stop_prefix_len()])

    def flush(self) -> str:
        """At the end of generation: send whatever was held back. A character left unfinished (the
        answer ended between its bytes) comes out as U+FFFD, exactly as the tokenizer decodes it."""
        if not self.stopped and self.read_offset < len(self.ids):
            self._add(self._decode_new(final=True))
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


def end_token_ids(lm) -> set[int]:
    tok = lm.tokenizer
    eos = lm.model.generation_config.eos_token_id
    eos = list(eos) if isinstance(eos, (list, tuple)) else ([] if eos is None else [eos])
    return set(tok.all_special_ids) & {tok.eos_token_id, *eos}


def _candidates(tokenizer, logits: np.ndarray, probs: np.ndarray, k: int) -> list[Candidate]:
    raw = softmax(logits)
    top = np.argsort(-logits, kind="stable")[:k]
    return [Candidate(int(i), text, round(float(logits[i]), 4), float(raw[i]), float(probs[i]))
            for i, text in zip(top, tokens_text(tokenizer, top))]


def decode_loop(lm, cache, first_logits: torch.Tensor, options: GenerationOptions, rid: str,
                prefill_started_at: float | None = None) -> Decode:
    """Choose, stream and feed back tokens until EOS, a stop string or max_new_tokens.

    Step 0's `seconds` runs from `prefill_started_at` (prefill + choosing the first token);
    every later step's from the moment the previous token was fed back.
    """
    tok = lm.tokenizer
    eos = end_token_ids(lm)
    rng = np.random.default_rng(options.seed)
    stream = StreamDetokenizer(tok, options.stop)
    steps, logits_rows, events, generated = [], [], [], []
    logits = first_logits.float().cpu().numpy()  # (V,)
    t_prev = prefill_started_at or time.perf_counter()
    first_at = 0.0
    finish = "length"
    for step in range(options.max_new_tokens):
        probs = final_probs(logits, options)  # (V,)
        token = int(np.argmax(logits)) if options.greedy else int(draw(probs, 1, rng)[0])
        now = time.perf_counter()
        first_at = first_at or now
        generated.append(token)
        logits_rows.append(logits.astype(np.float32))
        per_layer = bytes_per_layer(cache)
        steps.append(Step(step=step, token_id=token, token_text=token_text(tok, token), position=cache_len(cache),
                          top=_candidates(tok, logits, probs, TOP_CANDIDATES), kv_cache_tokens=cache_len(cache),
                          kv_cache_bytes=sum(per_layer), kv_bytes_per_layer=per_layer, seconds=now - t_prev))
        if token in eos:
            finish = "eos"
            break
        delta = stream.push(token)
        if delta:
            events.append({"event": "text_delta", "request_id": rid, "delta": delta, "step": step})
        if stream.stopped:
            finish = "stop"
            break
        if step + 1 == options.max_new_tokens:
            break
        t_prev = time.perf_counter()
        out = lm.forward([[token]], cache=cache)  # (1, 1): only the new token goes through
        logits = out.logits[0, -1].float().cpu().numpy()
    held_back = stream.flush()
    if held_back:
        events.append({"event": "text_delta", "request_id": rid, "delta": held_back, "step": len(steps) - 1})
    return Decode(steps=steps, step_logits=np.stack(logits_rows), generated_ids=generated, text=stream.emitted,
                  finish_reason=finish, events=events, kv_bytes_at_end=sum(bytes_per_layer(cache)),
                  kv_tokens_at_end=cache_len(cache), first_token_at=first_at)
