"""Prefill: the whole prompt through the model, with every internal tensor captured.

Up to FULL_ATTENTION_MAX_TOKENS tokens that is one eager forward pass (attention weights kept); a
longer prompt runs in passes of PREFILL_CHUNK tokens, each continuing from the KV cache of the ones
before, as LoadedModel.forward_chunked runs an uncaptured prompt.

Shape letters: L layers, H query heads, Hkv key/value heads, T positions, D model width,
Dh head width, V vocabulary, K top candidates per position (top_per_position).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from pipeline.model.capture import block_names, capture, layout_for
from pipeline.model.interface import LanguageModel
from pipeline.model.kv_tensors import bytes_per_layer, cache_layers
from pipeline.model.past import NOTHING, Past, Reuse
from pipeline.model.prefill_record import FULL_ATTENTION_MAX_TOKENS, PREFILL_CHUNK, TOP_K_PER_POSITION, Prefill
from pipeline.model.rope import rotate, signed_sin

# Past FULL_ATTENTION_MAX_TOKENS the captures are stored in float16 (half the memory; shown values keep 3
# significant digits, plenty for charts). Shorter prompts keep exact float32. A capture with a value past float16's
# range (Gemma 3's residual stream reaches ~10^5 on a few tokens) stays float32: in float16 it became inf, and
# Layers' cosines and norms nan.
COMPACT_DTYPE = torch.float16


def _hook_names(layout, model, n_layers: int, keep_attention: bool) -> list[str]:
    """Keys and values are hooked too (before RoPE; rotated here like the queries): a sliding-window
    layer's KV cache keeps only its last window of positions, so the cache cannot give all T."""
    names = ["embeddings", *layout.rope_names(model), "final_norm"]
    for field in ("q", "k", "v", "attn_out", "mlp_out", "hidden_states") + (("attention",) if keep_attention else ()):
        names += block_names(n_layers, field)
    return names


def _heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(1, T, n*Dh) -> (n, T, Dh)"""
    _, T, width = x.shape
    return x.view(T, n_heads, width // n_heads).transpose(0, 1)


def _fits_compact(t: torch.Tensor) -> bool:
    """Whether every finite value of t is finite in COMPACT_DTYPE too."""
    return bool((torch.isfinite(t.to(COMPACT_DTYPE)) | ~torch.isfinite(t)).all())


class _Filler:
    """Preallocated (n, T, ...) arrays filled chunk by chunk along the positions axis: float32, or float16 when
    `compact` for each field whose values all fit in it (a field is widened to float32 when a chunk does not)."""

    def __init__(self, T: int, compact: bool = False):
        self.T = T
        self.compact = compact
        self.arrays: dict[str, np.ndarray] = {}

    def put(self, field: str, start: int, rows: list[torch.Tensor], axis: int) -> None:
        """rows: one float32 tensor per block, each with the chunk's positions on `axis` (after the block axis)."""
        wide = not self.compact or not all(_fits_compact(t) for t in rows)
        if field in self.arrays and wide and self.arrays[field].dtype != np.float32:
            self.arrays[field] = self.arrays[field].astype(np.float32)
        for i, t in enumerate(rows):
            if field not in self.arrays:
                shape = list(t.shape)
                shape[axis] = self.T
                self.arrays[field] = np.empty((len(rows), *shape), dtype=np.float32 if wide else np.float16)
            index = [i] + [slice(None)] * t.dim()
            index[1 + axis] = slice(start, start + t.shape[axis])
            self.arrays[field][tuple(index)] = t.float().numpy()


@dataclass(frozen=True)
class PrefillResult:
    """What `run_prefill` hands on: the captured record, and what the decode continues from."""

    prefill: Prefill  # every captured tensor, as numpy arrays (what a stored run keeps)
    kv_cache: object  # HF DynamicCache: per layer (1, Hkv, T, Dh) keys (after RoPE) and values
    last_logits: torch.Tensor  # (V,) float32 on the CPU: scores for the token after the prompt


def keeps_attention(T: int) -> bool:
    """Whether the captured prefill of a T-token prompt keeps the attention weights (one eager pass)."""
    return T <= FULL_ATTENTION_MAX_TOKENS


def captured_past(lm: LanguageModel, ids: list[int], reuse: Reuse | None) -> Past:
    """The cached blocks `ids` starts with that its captured prefill can use (with their captures; their attention
    rows too when it keeps attention); NOTHING without the server's prefix cache."""
    return reuse.take(lm, ids, captured=True, keep_attention=keeps_attention(len(ids))) if reuse else NOTHING


def run_prefill(lm: LanguageModel, ids: list[int], keep_attention: bool | None = None,
                past: Past = NOTHING) -> PrefillResult:
    """Run the prompt once, capturing everything.

    Up to FULL_ATTENTION_MAX_TOKENS the prompt runs in one eager pass that also returns the
    attention weights. A longer prompt runs in chunks of PREFILL_CHUNK tokens with SDPA, each chunk
    continuing from the KV cache of the ones before: the model's lock is released between chunks,
    so other requests are not held up for the whole prompt, and activations stay chunk-sized.

    past: the first past.n positions computed by an earlier request (pipeline.model.past): the model runs on the
    rest only, over past.cache, and those positions' captures are past.captures (kept with the blocks by the run
    that computed them). `seconds` is then the rest's passes alone.
    """
    layout = layout_for(lm.model)  # refuses an architecture the capture does not know, before any pass
    T = len(ids)
    long_prompt = not keeps_attention(T)
    keep_attention = not long_prompt if keep_attention is None else keep_attention
    chunk = T if keep_attention else PREFILL_CHUNK
    names = _hook_names(layout, lm.model, lm.dims.L, keep_attention)
    fill, kv_cache, seconds = _Filler(T, compact=long_prompt), past.cache, 0.0
    _fill_past(fill, past, T, keep_attention)
    for start in range(past.n, T, chunk):
        with capture(lm, names, store_dtype=torch.float32) as rec:  # one chunk; _Filler stores it compact
            t0 = time.perf_counter()
            out = lm.forward([ids[start:start + chunk]], cache=kv_cache,
                             attention="eager" if keep_attention else "sdpa")  # ids (1, chunk)
            last_logits = out.logits[0, -1].float().cpu()  # (V,)
            seconds += time.perf_counter() - t0
            kv_cache = out.cache  # DynamicCache: per layer (1, Hkv, T so far, Dh) keys and values
        calls = {name: tensors[0] for name, tensors in rec.items()}  # (1, chunk, ...) each
        _record_chunk(fill, calls, lm, layout, start, 0, len(ids[start:start + chunk]), keep_attention)
    return _result(lm, ids, fill, kv_cache, last_logits, seconds)


def can_batch_prefill(lm: LanguageModel, prompts: list[list[int]]) -> bool:
    """Whether `run_prefill_batch` may run these prompts together: each is short enough for one eager pass, and
    every layer attends to all positions (a sliding-window layer's cache keeps only its window, per request)."""
    return (len(prompts) > 1 and all(0 < len(p) <= FULL_ATTENTION_MAX_TOKENS for p in prompts)
            and lm.dims.sliding_window is None)


def run_prefill_batch(lm: LanguageModel, prompts: list[list[int]]) -> list[PrefillResult]:
    """Several short prompts in one eager pass, each captured as `run_prefill` captures it alone: one read of the
    weights for all of them, as their decode steps share one.

    The prompts are padded on the right to the longest (B, T): a causal model's position t sees only positions
    up to t, so a prompt's own positions never see the padding after them, and its positions count from 0 as
    when it runs alone. Each row is cut back to its own n positions (captures, KV cache, attention (H, n, n));
    its next-token scores are the logits at its own last position. The numbers equal a lone run's up to float
    rounding (a matrix product over B*T rows may sum in another order; on the CPU SmolLM2's captures and cache come
    out bit-equal, on a GPU, whose kernels depend on the batch's shape, within 1e-4; test_prefill_batch.py).
    `seconds` of each record is the shared pass's time: what each request waited for its prefill."""
    from transformers import DynamicCache

    assert can_batch_prefill(lm, prompts), "run_prefill_batch takes two or more prompts that can_batch_prefill allows"
    layout = layout_for(lm.model)
    lengths = [len(p) for p in prompts]
    T = max(lengths)
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    ids = [p + [pad] * (T - len(p)) for p in prompts]  # (B, T)
    names = _hook_names(layout, lm.model, lm.dims.L, keep_attention=True)
    last = sorted(set(n - 1 for n in lengths))  # the positions whose logits some row needs
    with capture(lm, names, store_dtype=torch.float32) as rec:
        t0 = time.perf_counter()
        keep = torch.tensor(last, device=lm.device)
        out = lm.forward(ids, attention="eager", logits_to_keep=keep)  # logits (B, len(last), V)
        seconds = time.perf_counter() - t0
    calls = {name: tensors[0] for name, tensors in rec.items()}  # (B, T, ...) each
    batched = cache_layers(out.cache)  # per layer (B, Hkv, T, Dh)
    results = []
    for b, n in enumerate(lengths):
        fill = _Filler(n)
        _record_chunk(fill, calls, lm, layout, 0, b, n, keep_attention=True)
        cache = DynamicCache()
        for i, (k, v) in enumerate(batched):
            cache.update(k[b:b + 1, :, :n].clone(), v[b:b + 1, :, :n].clone(), i)
        last_logits = out.logits[b, last.index(n - 1)].float().cpu()  # (V,)
        results.append(_result(lm, prompts[b], fill, cache, last_logits, seconds))
    return results


def _record_chunk(fill: _Filler, calls: dict[str, torch.Tensor], lm: LanguageModel, layout, start: int, row: int,
                  n: int, keep_attention: bool) -> None:
    """One forward call's captures (calls: hook name -> (B, chunk, ...)) of batch row `row`, its first n
    positions, into `fill` from position `start`."""
    dims = lm.dims
    own = lambda t: t[row, :n]  # noqa: E731 - (chunk, ...) of this row
    take = lambda field: [own(calls[name]) for name in block_names(dims.L, field)]  # noqa: E731
    tables = {name.rsplit(".", 1)[0]: None for name in layout.rope_names(lm.model)}  # 'rope' or 'rope.{type}'
    table = lambda t: t[min(row, t.shape[0] - 1), :n].float()  # noqa: E731 - one table serves every row alike
    for prefix in tables:  # (n, Dh) each: the RoPE tables HF used for these positions
        cos, sin = table(calls[f"{prefix}.cos"]), table(calls[f"{prefix}.sin"])
        tables[prefix] = (cos, signed_sin(sin))
    rope_of = [tables[layout.layer_rope(lm.model, i)] for i in range(dims.L)]

    def rotated(field: str, n_heads: int) -> list[torch.Tensor]:
        """Block i's q or k (n, heads*Dh) turned by layer i's RoPE table -> (heads, n, Dh)."""
        return [rotate(_heads(x[None].float(), n_heads), *rope_of[i]).to(x.dtype)
                for i, x in enumerate(take(field))]

    fill.put("embeddings", start, [own(calls["embeddings"])], axis=0)  # (1, T, D)
    fill.put("hidden_states", start, take("hidden_states"), axis=0)  # (L, T, D)
    fill.put("attn_out", start, take("attn_out"), axis=0)  # (L, T, D)
    fill.put("mlp_out", start, take("mlp_out"), axis=0)  # (L, T, D)
    fill.put("q_rot", start, rotated("q", dims.H), axis=1)  # (L, H, T, Dh)
    fill.put("k_rot", start, rotated("k", dims.Hkv), axis=1)  # (L, Hkv, T, Dh): what a full cache holds
    fill.put("v", start, [_heads(x[None], dims.Hkv) for x in take("v")], axis=1)  # (L, Hkv, T, Dh)
    fill.put("final_norm", start, [own(calls["final_norm"])], axis=0)  # (1, T, D)
    if keep_attention:  # (L, H, T, T): this row's queries over its own keys (those of the reused positions too)
        fill.put("attention", start, [a[row, :, :n, :start + n] for a in
                                      (calls[name] for name in block_names(dims.L, "attention"))], axis=1)


def _fill_past(fill: _Filler, past: Past, T: int, keep_attention: bool) -> None:
    """The reused positions' captures (each block's, kept by the run that computed it) into `fill`."""
    assert not past.n or len(past.captures), "a captured run reuses only blocks that kept their captures"
    bs = past.n // len(past.captures) if past.captures else 0
    for i, block in enumerate(past.captures):
        start = i * bs
        rows = lambda name: list(torch.from_numpy(block[name]))  # noqa: E731 - one tensor per layer
        fill.put("embeddings", start, [torch.from_numpy(block["embeddings"])], axis=0)  # (1, Bs, D)
        fill.put("hidden_states", start, rows("hidden_states")[1:], axis=0)  # (L, Bs, D): [0] is the embeddings
        fill.put("attn_out", start, rows("attn_out"), axis=0)
        fill.put("mlp_out", start, rows("mlp_out"), axis=0)
        for name in ("q_rot", "k_rot", "v"):
            fill.put(name, start, rows(name), axis=1)  # (L, heads, Bs, Dh)
        fill.put("final_norm", start, [torch.from_numpy(block["final_norm"])], axis=0)
        if keep_attention:  # (L, H, Bs, start + Bs) -> keys padded to T (a position sees none after it)
            wide = torch.nn.functional.pad(torch.from_numpy(block["attention"]), (0, T - start - bs))
            fill.put("attention", start, list(wide), axis=1)


def _result(lm: LanguageModel, ids: list[int], fill: _Filler, kv_cache, last_logits: torch.Tensor,
            seconds: float) -> PrefillResult:
    a = fill.arrays
    embeddings = a.pop("embeddings")[0]  # (T, D)
    prefill = Prefill(
        ids=list(ids),
        embeddings=embeddings,
        hidden_states=np.concatenate([embeddings[None], a.pop("hidden_states")]),  # (L+1, T, D)
        attn_out=a.pop("attn_out"),
        mlp_out=a.pop("mlp_out"),
        q_rot=a.pop("q_rot"),
        k_rot=a.pop("k_rot"),  # (L, Hkv, T, Dh) keys after RoPE, as a full KV cache holds them
        v=a.pop("v"),  # (L, Hkv, T, Dh)
        attention=a.pop("attention", None),
        final_norm=a.pop("final_norm")[0],  # (T, D)
        last_logits=last_logits.numpy(),
        kv_bytes_per_layer=bytes_per_layer(kv_cache),
        seconds=seconds,
    )
    return PrefillResult(prefill, kv_cache, last_logits)


def top_per_position(lm: LanguageModel, final_norm: np.ndarray, k: int = TOP_K_PER_POSITION, chunk: int = 256):
    """The model's k best next tokens after every prompt position: the LM head over the captured final norm
    (T, D), in chunks, never (T, V) at once -> ids (T, k) int64, logits (T, k), probs (T, k) (softmax at
    temperature 1). Not part of the prefill: no page reads it (the logit lens computes its own last row), and
    over every position it was a fifth of a captured prefill's arithmetic; the command line's `--tensors`
    JSON asks for it.

        ids, logits, probs = top_per_position(lm, trace.prefill.final_norm)  # ids[-1, 0]: a greedy first token
    """
    head = lm.model.get_output_embeddings()
    normed = torch.from_numpy(np.ascontiguousarray(final_norm))
    ids, logits, probs = [], [], []
    with torch.inference_mode():
        for start in range(0, normed.shape[0], chunk):
            rows = normed[start:start + chunk].to(head.weight.device, dtype=head.weight.dtype)
            scores = head(rows).float()  # (chunk, V)
            top = scores.topk(k, dim=-1)
            ids.append(top.indices)
            logits.append(top.values)
            probs.append(torch.softmax(scores, dim=-1).gather(-1, top.indices))
    as_np = lambda t: torch.cat(t).detach().float().cpu().numpy()  # noqa: E731
    return as_np(ids).astype(np.int64), as_np(logits), as_np(probs)
