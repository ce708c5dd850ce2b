"""Stage: generation. The decode loop chooses one token at a time, reusing the KV cache, and streams
the answer as text_delta events that never need taking back.

Shape letters: S decode steps, V vocabulary, L layers.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from ..maths import top_indices
from ..model.kv_tensors import bytes_per_layer, cache_layers, cache_len
from ..text import token_text, tokens_text, unfinished_end
from .next_token import draw, final_probs, softmax
from .decode_record import Candidate, Decode, Step
from .request import GenerationOptions
from ..model.interface import LanguageModel

TOP_CANDIDATES = 10  # candidates recorded per step
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


def _candidates(tokenizer, logits: np.ndarray, probs: np.ndarray, k: int) -> list[Candidate]:
    raw = softmax(logits)
    top = top_indices(logits, k)
    return [Candidate(int(i), text, round(float(logits[i]), 4), float(raw[i]), float(probs[i]))
            for i, text in zip(top, tokens_text(tokenizer, top))]


class _Answer:
    """One request's side of the decode loop: choosing, recording and streaming its tokens."""

    def __init__(self, lm: LanguageModel, first_logits: torch.Tensor, options: GenerationOptions, rid: str, started_at: float,
                 force: dict[int, int] | None = None):
        self.tok, self.eos, self.options, self.rid = lm.tokenizer, end_token_ids(lm), options, rid
        self.force = force or {}  # {step: token id} chosen by a person instead of the sampler
        self.rng = np.random.default_rng(options.seed)
        self.stream = StreamDetokenizer(lm.tokenizer, options.stop)
        self.steps: list[Step] = []
        self.logits_rows: list[np.ndarray] = []
        self.events: list[dict] = []
        self.generated: list[int] = []
        self.logits = first_logits.float().cpu().numpy()  # (V,) scores for the next token
        self.t_prev = started_at
        self.first_at = 0.0
        self.finish: str | None = None  # set once the answer has ended

    def choose(self, kv_tokens: int, kv_per_layer: list[int], batch_size: int = 1,
               allowed: np.ndarray | None = None) -> int | None:
        """Pick and record the next token; returns it, or None when the answer has just ended.

        allowed: (V,) bool from a grammar; the others get probability 0, the raw scores are still kept."""
        step, logits, options = len(self.steps), self.logits, self.options
        probs = final_probs(logits if allowed is None else np.where(allowed, logits, -np.inf), options)  # (V,)
        token = int(np.argmax(probs)) if options.greedy else int(draw(probs, 1, self.rng)[0])
        token = self.force.get(step, token)  # the sampler still draws, so later steps see the same randomness
        now = time.perf_counter()
        self.first_at = self.first_at or now
        self.generated.append(token)
        self.logits_rows.append(logits.astype(np.float32))
        self.steps.append(Step(step=step, token_id=token, token_text=token_text(self.tok, token), position=kv_tokens,
                               top=_candidates(self.tok, logits, probs, TOP_CANDIDATES), kv_cache_tokens=kv_tokens,
                               kv_cache_bytes=sum(kv_per_layer), kv_bytes_per_layer=kv_per_layer,
                               seconds=now - self.t_prev, batch_size=batch_size, forced=step in self.force))
        if token in self.eos:
            self.finish = "eos"
            return None
        delta = self.stream.push(token)
        if delta:
            self.events.append({"event": "text_delta", "request_id": self.rid, "delta": delta, "step": step})
        if self.stream.stopped:
            self.finish = "stop"
        elif step + 1 == options.max_new_tokens:
            self.finish = "length"
        return None if self.finish else token

    def result(self, kv_bytes_at_end: int, kv_tokens_at_end: int) -> Decode:
        held_back = self.stream.flush()
        if held_back:
            self.events.append({"event": "text_delta", "request_id": self.rid, "delta": held_back,
                                "step": len(self.steps) - 1})
        return Decode(steps=self.steps, step_logits=np.stack(self.logits_rows), generated_ids=self.generated,
                      text=self.stream.emitted, finish_reason=self.finish or "length", events=self.events,
                      kv_bytes_at_end=kv_bytes_at_end, kv_tokens_at_end=kv_tokens_at_end, first_token_at=self.first_at)


def decode_loop(lm: LanguageModel, cache, first_logits: torch.Tensor, options: GenerationOptions, rid: str,
                prefill_started_at: float | None = None, force: dict[int, int] | None = None) -> Decode:
    """Choose, stream and feed back tokens until EOS, a stop string or max_new_tokens.

    Step 0's `seconds` runs from `prefill_started_at` (prefill + choosing the first token);
    every later step's from the moment the previous token was fed back. force: {step: token id}.
    """
    answer = _Answer(lm, first_logits, options, rid, prefill_started_at or time.perf_counter(), force)
    return _continue(lm, cache, answer)


def _continue(lm: LanguageModel, cache, answer: "_Answer") -> Decode:
    """Run the loop from the answer's current state to its end, feeding each token back."""
    while (token := answer.choose(cache_len(cache), bytes_per_layer(cache))) is not None:
        answer.t_prev = time.perf_counter()
        out = lm.forward([[token]], cache=cache)  # (1, 1): only the new token goes through
        answer.logits = out.logits[0, -1].float().cpu().numpy()
    return answer.result(sum(bytes_per_layer(cache)), cache_len(cache))


def decode_batch(lm: LanguageModel, caches: list, first_logits: list[torch.Tensor], options: list[GenerationOptions],
                 rids: list[str], started_at: list[float]) -> list[Decode]:
    """Several requests decoded together, one forward pass per step for all of them, as servers do.

    Each request keeps its own options, random generator and stream. Their KV caches are joined
    into one batch, left-padded to the longest (B, Hkv, T, Dh) with an attention mask that hides the
    padding; each row continues at its own position. A row whose answer has ended leaves the batch.
    The bytes recorded per request are its own rows' (real positions, not padding).
    """
    answers = [_Answer(lm, lg, o, r, t) for lg, o, r, t in zip(first_logits, options, rids, started_at)]
    lengths = [cache_len(c) for c in caches]  # real positions per request
    cache, mask = _join_caches(lm, caches, lengths)  # mask (B, T) 1 = real, 0 = padding
    per_position = [b // max(lengths[0], 1) for b in bytes_per_layer(caches[0])]  # bytes one position holds
    results: dict[int, Decode] = {}
    live = list(range(len(answers)))
    while live:
        tokens, keep = [], []
        for row, i in enumerate(live):
            token = answers[i].choose(lengths[i], [b * lengths[i] for b in per_position], batch_size=len(live))
            if token is None:
                results[i] = answers[i].result(sum(per_position) * lengths[i], lengths[i])
            else:
                tokens.append(token)
                keep.append(row)
        if not keep:
            break
        if len(keep) < len(live):  # finished answers leave the batch
            index = torch.tensor(keep, device=mask.device)
            cache.batch_select_indices(index)
            mask = mask[index]
            live = [live[r] for r in keep]
        mask = torch.cat([mask, torch.ones((len(live), 1), dtype=mask.dtype, device=mask.device)], dim=1)
        positions = torch.tensor([[lengths[i]] for i in live])  # (B, 1) each row's own next position
        t_fed = time.perf_counter()
        for i in live:
            answers[i].t_prev = t_fed
            lengths[i] += 1
        out = lm.forward([[t] for t in tokens], cache=cache, attention_mask=mask, position_ids=positions)
        scores = out.logits[:, -1].float().cpu().numpy()  # (B, V)
        for row, i in enumerate(live):
            answers[i].logits = scores[row]
    return [results[i] for i in range(len(answers))]


def _join_caches(lm: LanguageModel, caches: list, lengths: list[int]):
    """Per-request caches (1, Hkv, T_i, Dh) per layer -> one DynamicCache (B, Hkv, T_max, Dh), left-padded."""
    from ..model.hf_imports import transformers_names

    DynamicCache, = transformers_names("DynamicCache")

    T = max(lengths)
    layers = []
    for per_request in zip(*(cache_layers(c) for c in caches)):  # one layer: [(K, V) per request]
        ks, vs = [], []
        for (k, v), n in zip(per_request, lengths):
            pad = (0, 0, T - n, 0)  # left-pad the positions axis
            ks.append(torch.nn.functional.pad(k, pad))
            vs.append(torch.nn.functional.pad(v, pad))
        layers.append((torch.cat(ks), torch.cat(vs)))  # (B, Hkv, T, Dh) each
    mask = torch.tensor([[0] * (T - n) + [1] * n for n in lengths], device=lm.device)  # (B, T)
    return DynamicCache(ddp_cache_data=layers, config=lm.config), mask
