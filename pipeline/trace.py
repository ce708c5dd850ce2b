"""One chat request followed end to end: the flat record every page and the CLI read."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from . import batch as batching
from .decode import DecodeResult, decode_loop
from .errors import InputError
from .options import ChatRequest
from .prefill import Prefill, run_prefill
from .request import RequestState, anthropic_style, openai_style, request_id
from .template import describe_tokens, render_prompt, segments, tokenize_segments


def model_info(lm) -> dict:
    c = lm.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    rope = getattr(c, "rope_parameters", None) or {}
    return {
        "name": lm.name,
        "layers": c.num_hidden_layers,
        "heads": c.num_attention_heads,
        "kv_heads": c.num_key_value_heads,
        "head_dim": head_dim,
        "hidden": c.hidden_size,
        "mlp_hidden": getattr(c, "intermediate_size", None),
        "vocab": c.vocab_size,
        "dtype": str(lm.model.dtype).replace("torch.", ""),
        "context_window": c.max_position_embeddings,
        "rope_theta": float(rope.get("rope_theta", getattr(c, "rope_theta", 10000.0))),
        "device": str(lm.device),
        "bytes_per_value": torch.tensor([], dtype=lm.model.dtype).element_size(),
    }


@dataclass
class Trace:
    request: dict
    prompt_text: str
    segments: list[dict]
    tokens: list[dict]
    naive_tokens: list[dict]
    model: dict
    batch: dict
    prefill: Prefill
    steps: list[dict]
    step_logits: np.ndarray  # (S, V)
    generated_token_ids: list[int]
    text: str
    finish_reason: str
    timings: dict
    events: list[dict]
    usage: dict
    cleanup: dict
    extra: dict = field(default_factory=dict)

    @property
    def ids(self) -> list[int]:
        return [t["id"] for t in self.tokens]

    def to_json(self, include_tensors: bool = False) -> dict:
        out = {
            "request": self.request,
            "prompt_text": self.prompt_text,
            "segments": self.segments,
            "tokens": self.tokens,
            "naive_tokens": self.naive_tokens,
            "model": self.model,
            "batch": self.batch,
            "prefill": {
                "seconds": self.prefill.seconds,
                "kv_bytes_per_layer": self.prefill.kv_bytes_per_layer,
                "shapes": {k: list(v.shape) for k, v in self.tensors().items()},
                "first_token_top": self.steps[0]["top"] if self.steps else [],
            },
            "steps": self.steps,
            "generated_token_ids": self.generated_token_ids,
            "text": self.text,
            "finish_reason": self.finish_reason,
            "timings": self.timings,
            "events": self.events,
            "usage": self.usage,
            "cleanup": self.cleanup,
        }
        if include_tensors:
            out["tensors"] = {k: v.tolist() for k, v in self.tensors().items()}
        return out

    def tensors(self) -> dict[str, np.ndarray]:
        p = self.prefill
        named = {
            "embeddings": p.embeddings, "hidden_states": p.hidden_states, "attn_out": p.attn_out,
            "mlp_out": p.mlp_out, "q_rot": p.q_rot, "k_rot": p.k_rot, "v": p.v, "final_norm": p.final_norm,
            "last_logits": p.last_logits, "top_ids": p.top_ids, "top_probs": p.top_probs,
            "step_logits": self.step_logits,
        }
        if p.attention is not None:
            named["attention"] = p.attention
        return named


def tokenize_request(lm, request: ChatRequest):
    """(prompt_text, segments, safe tokens, naive tokens) for a validated request."""
    prompt_text = render_prompt(lm.tokenizer, request)
    segs = segments(lm.tokenizer, request)
    ids, roles = tokenize_segments(lm.tokenizer, segs, safe=True)
    naive_ids, naive_roles = tokenize_segments(lm.tokenizer, segs, safe=False)
    return (prompt_text, segs, describe_tokens(lm.tokenizer, ids, roles),
            describe_tokens(lm.tokenizer, naive_ids, naive_roles))


def check_fits(lm, n_prompt: int, max_new_tokens: int) -> None:
    window = lm.config.max_position_embeddings
    if n_prompt >= window:
        raise InputError("messages", f"the prompt is {n_prompt:,} tokens but the context window is {window:,}; "
                                     "shorten the conversation.")
    if n_prompt + max_new_tokens > window:
        raise InputError("max_new_tokens", f"{n_prompt:,} prompt tokens + {max_new_tokens:,} new tokens exceed the "
                                           f"{window:,}-token context window; at most {window - n_prompt:,} fit.")


def run_trace(request: ChatRequest, lm=None) -> Trace:
    """Follow one request through every stage on the real model."""
    from .loader import shared_model

    lm = lm or shared_model()
    request.validate()
    t0 = time.perf_counter()
    rid = request_id(request, time.time())
    state = RequestState(rid)
    prompt_text, segs, tokens, naive = tokenize_request(lm, request)
    ids = [t.id for t in tokens]
    check_fits(lm, len(ids), request.options.max_new_tokens)
    single = batching.describe(batching.batch_tensors([ids], lm.tokenizer.pad_token_id))
    state.advance("prefill")
    prefill_started_at = time.perf_counter()
    prefill, cache, last_logits = run_prefill(lm, ids)
    state.advance("decoding")
    result: DecodeResult = decode_loop(lm, cache, last_logits, request.options, rid, prefill_started_at)
    state.advance("completed")
    released = {"kv_bytes_released": result.kv_bytes_at_end, "kv_tokens_released": result.kv_tokens_at_end}
    del cache  # the request's KV cache is freed once the answer is complete
    usage = {"prompt_tokens": len(ids), "completion_tokens": len(result.generated_ids),
             "total_tokens": len(ids) + len(result.generated_ids)}
    events = result.events + [{
        "event": "completed", "request_id": rid, "finish_reason": result.finish_reason, "text": result.text,
        "generated_token_ids": result.generated_ids, "usage": usage,
    }]
    decode_times = result.step_seconds[1:]
    timings = {
        "ttft_s": result.first_token_at - t0,
        "tpot_s": float(np.mean(decode_times)) if decode_times else None,
        "prefill_s": prefill.seconds,
        "total_s": time.perf_counter() - t0,
    }
    return Trace(
        request={"id": rid, "openai": openai_style(request), "anthropic": anthropic_style(request),
                 "options": request.options.to_dict(), "states": state.history},
        prompt_text=prompt_text,
        segments=[{"text": s.text, "role": s.role} for s in segs],
        tokens=[t.to_dict() for t in tokens],
        naive_tokens=[t.to_dict() for t in naive],
        model=model_info(lm),
        batch={"single": single, "entry": {"request_id": rid, "batch_index": 0, "phase": "prefill",
                                            "token_count": len(ids)}},
        prefill=prefill,
        steps=result.steps,
        step_logits=result.step_logits,
        generated_token_ids=result.generated_ids,
        text=result.text,
        finish_reason=result.finish_reason,
        timings=timings,
        events=events,
        usage=usage,
        cleanup=released,
    )
