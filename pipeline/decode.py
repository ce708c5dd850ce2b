"""The decode loop: one token at a time, reusing the KV cache, streamed as events."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from .kv import bytes_per_layer
from .options import GenerationOptions
from .render import piece_bytes, render_bytes
from .sampling import final_probs, draw, softmax

TOP_CANDIDATES = 10  # candidates recorded per step


@dataclass
class DecodeResult:
    steps: list[dict]
    step_logits: np.ndarray  # (S, V) the scores each token was drawn from
    generated_ids: list[int]
    text: str
    finish_reason: str  # eos | length | stop
    events: list[dict]
    kv_bytes_at_end: int
    kv_tokens_at_end: int
    first_token_at: float = 0.0  # perf_counter timestamp of the first chosen token
    step_seconds: list[float] = field(default_factory=list)


class StreamDetokenizer:
    """Turns ids into text deltas that never need taking back.

    Held back until the next token decides: a partial UTF-8 character, and any tail that could be
    the start of a stop string (stop " to this": "The answer to" is sent as "The answer").
    """

    def __init__(self, tokenizer, stop: tuple[str, ...] = ()):
        self.tokenizer = tokenizer
        self.stop = stop
        self.ids: list[int] = []
        self.text = ""  # everything decoded so far (cut at a stop string once one appears)
        self.emitted = ""
        self.stopped = False

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        self.text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        cut = min((self.text.find(s) for s in self.stop if s in self.text), default=-1)
        if cut >= 0:
            self.text, self.stopped = self.text[:cut], True
            return self._emit(self.text)
        if self.text.endswith("\ufffd"):
            return ""  # wait for the rest of a multi-byte character
        return self._emit(self.text[:len(self.text) - self._stop_prefix_len(self.text)])

    def flush(self) -> str:
        """At the end of generation: send whatever was held back."""
        return self._emit(self.text)

    def _stop_prefix_len(self, text: str) -> int:
        return max((k for s in self.stop for k in range(1, len(s)) if text.endswith(s[:k])), default=0)

    def _emit(self, upto: str) -> str:
        delta = upto[len(self.emitted):]
        self.emitted = upto
        return delta


def _cache_len(cache) -> int:
    return int(cache.get_seq_length())


def _top(tokenizer, logits: torch.Tensor, probs: np.ndarray, k: int) -> list[dict]:
    raw = softmax(logits.numpy())
    top = torch.topk(logits, k)
    pieces = tokenizer.convert_ids_to_tokens(top.indices.tolist())
    return [
        {"id": int(i), "text": render_bytes(piece_bytes(p)), "logit": round(float(l), 4),
         "prob": float(raw[i]), "prob_after_filters": float(probs[i])}
        for i, l, p in zip(top.indices.tolist(), top.values.tolist(), pieces)
    ]


def decode_loop(lm, cache, first_logits: torch.Tensor, options: GenerationOptions, rid: str,
                prefill_started_at: float | None = None) -> DecodeResult:
    """Choose, stream and feed back tokens until EOS, a stop string or max_new_tokens.

    Step 0's `seconds` runs from `prefill_started_at` (prefill + choosing the first token);
    every later step's from the moment the previous token was fed back.
    """
    tok = lm.tokenizer
    eos = set(tok.all_special_ids) & {tok.eos_token_id, *(_as_list(lm.model.generation_config.eos_token_id))}
    rng = np.random.default_rng(options.seed)
    stream = StreamDetokenizer(tok, options.stop)
    steps, logits_rows, events, generated = [], [], [], []
    logits = first_logits.float().cpu()  # (V,)
    t_prev = prefill_started_at or time.perf_counter()
    first_at = 0.0
    finish = "length"
    for step in range(options.max_new_tokens):
        probs = final_probs(logits.numpy(), options)
        token = int(torch.argmax(logits)) if options.temperature == 0 else int(draw(probs, 1, rng)[0])
        now = time.perf_counter()
        first_at = first_at or now
        generated.append(token)
        logits_rows.append(logits.numpy().astype(np.float32))
        per_layer = bytes_per_layer(cache)
        steps.append({
            "step": step,
            "token_id": token,
            "token_text": render_bytes(piece_bytes(tok.convert_ids_to_tokens([token])[0])),
            "position": _cache_len(cache),
            "top": _top(tok, logits, probs, TOP_CANDIDATES),
            "kv_cache_tokens": _cache_len(cache),
            "kv_cache_bytes": sum(per_layer),
            "kv_bytes_per_layer": per_layer,
            "seconds": now - t_prev,
        })
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
        with torch.inference_mode(), lm.lock:
            out = lm.model(input_ids=torch.tensor([[token]], device=lm.device), cache=cache, use_cache=True)
            lm.calls += 1
        logits = out.logits[0, -1].float().cpu()
    held_back = stream.flush()
    if held_back:
        events.append({"event": "text_delta", "request_id": rid, "delta": held_back, "step": len(steps) - 1})
    return DecodeResult(
        steps=steps,
        step_logits=np.stack(logits_rows),
        generated_ids=generated,
        text=stream.emitted,
        finish_reason=finish,
        events=events,
        kv_bytes_at_end=sum(bytes_per_layer(cache)),
        kv_tokens_at_end=_cache_len(cache),
        first_token_at=first_at,
        step_seconds=[s["seconds"] for s in steps],
    )


def _as_list(x) -> list:
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]
