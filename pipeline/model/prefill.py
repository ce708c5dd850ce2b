"""Prefill: the whole prompt through the model, with every internal tensor captured.

Up to FULL_ATTENTION_MAX_TOKENS tokens that is one eager forward pass (attention weights kept); a
longer prompt runs in passes of PREFILL_CHUNK tokens, each continuing from the KV cache of the ones
before, as LoadedModel.forward_chunked runs an uncaptured prompt.

Shape letters: L layers, H query heads, Hkv key/value heads, T positions, D model width,
Dh head width, V vocabulary, K top candidates kept per position.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from .capture import block_names, capture, layout_for
from .kv_tensors import bytes_per_layer
from .prefill_record import FULL_ATTENTION_MAX_TOKENS, PREFILL_CHUNK, TOP_K_PER_POSITION, Prefill
from .rope import rotate, signed_sin
from .interface import LanguageModel

# Past FULL_ATTENTION_MAX_TOKENS the captures are stored in float16 (half the memory; shown values keep 3
# significant digits, plenty for charts). Shorter prompts keep exact float32.
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


def _np_dtype(t: torch.Tensor):
    return np.float16 if t.dtype == torch.float16 else np.float32


class _Filler:
    """Preallocated (n, T, ...) arrays filled chunk by chunk along the positions axis."""

    def __init__(self, T: int):
        self.T = T
        self.arrays: dict[str, np.ndarray] = {}

    def put(self, field: str, start: int, rows: list[torch.Tensor], axis: int) -> None:
        """rows: one tensor per block, each with the chunk's positions on `axis` (after the block axis)."""
        for i, t in enumerate(rows):
            if field not in self.arrays:
                shape = list(t.shape)
                shape[axis] = self.T
                self.arrays[field] = np.empty((len(rows), *shape), dtype=_np_dtype(t))
            index = [i] + [slice(None)] * t.dim()
            index[1 + axis] = slice(start, start + t.shape[axis])
            self.arrays[field][tuple(index)] = t.numpy()


@dataclass(frozen=True)
class PrefillResult:
    """What `run_prefill` hands on: the captured record, and what the decode continues from."""

    prefill: Prefill  # every captured tensor, as numpy arrays (what a stored run keeps)
    kv_cache: object  # HF DynamicCache: per layer (1, Hkv, T, Dh) keys (after RoPE) and values
    last_logits: torch.Tensor  # (V,) float32 on the CPU: scores for the token after the prompt


def run_prefill(lm: LanguageModel, ids: list[int], keep_attention: bool | None = None) -> PrefillResult:
    """Run the prompt once, capturing everything.

    Up to FULL_ATTENTION_MAX_TOKENS the prompt runs in one eager pass that also returns the
    attention weights. A longer prompt runs in chunks of PREFILL_CHUNK tokens with SDPA, each chunk
    continuing from the KV cache of the ones before: the model's lock is released between chunks,
    so other requests are not held up for the whole prompt, and activations stay chunk-sized.
    """
    layout = layout_for(lm.model)  # refuses an architecture the capture does not know, before any pass
    dims = lm.dims
    T = len(ids)
    long_prompt = T > FULL_ATTENTION_MAX_TOKENS
    keep_attention = not long_prompt if keep_attention is None else keep_attention
    store = COMPACT_DTYPE if long_prompt else torch.float32
    chunk = T if keep_attention else PREFILL_CHUNK
    names = _hook_names(layout, lm.model, dims.L, keep_attention)
    fill, kv_cache, seconds = _Filler(T), None, 0.0
    for start in range(0, T, chunk):
        with capture(lm, names, store_dtype=store) as rec:
            t0 = time.perf_counter()
            out = lm.forward([ids[start:start + chunk]], cache=kv_cache,
                             attention="eager" if keep_attention else "sdpa")  # ids (1, chunk)
            last_logits = out.logits[0, -1].float().cpu()  # (V,)
            seconds += time.perf_counter() - t0
            kv_cache = out.cache  # DynamicCache: per layer (1, Hkv, T so far, Dh) keys and values
        take = lambda field, f=None: [f(rec.pop(n)[0][0]) if f else rec.pop(n)[0][0]  # noqa: E731
                                      for n in block_names(dims.L, field)]
        tables = {n.rsplit(".", 1)[0]: None for n in layout.rope_names(lm.model)}  # 'rope' or 'rope.{type}'
        for prefix in tables:  # (chunk, Dh) each: the RoPE tables HF used for these positions
            cos, sin = rec.pop(f"{prefix}.cos")[0][0].float(), rec.pop(f"{prefix}.sin")[0][0].float()
            tables[prefix] = (cos, signed_sin(sin))
        rope_of = [tables[layout.layer_rope(lm.model, i)] for i in range(dims.L)]

        def rotated(field: str, n_heads: int) -> list[torch.Tensor]:
            """Block i's q or k (chunk, n*Dh) turned by layer i's RoPE table -> (n, chunk, Dh)."""
            return [rotate(_heads(x[None].float(), n_heads), *rope_of[i]).to(x.dtype)
                    for i, x in enumerate(take(field))]

        fill.put("embeddings", start, [rec.pop("embeddings")[0][0]], axis=0)  # (1, T, D)
        fill.put("hidden_states", start, take("hidden_states"), axis=0)  # (L, T, D)
        fill.put("attn_out", start, take("attn_out"), axis=0)  # (L, T, D)
        fill.put("mlp_out", start, take("mlp_out"), axis=0)  # (L, T, D)
        fill.put("q_rot", start, rotated("q", dims.H), axis=1)  # (L, H, T, Dh)
        fill.put("k_rot", start, rotated("k", dims.Hkv), axis=1)  # (L, Hkv, T, Dh): what a full cache holds
        fill.put("v", start, [_heads(x[None], dims.Hkv) for x in take("v")], axis=1)  # (L, Hkv, T, Dh)
        fill.put("final_norm", start, [rec.pop("final_norm")[0][0]], axis=0)  # (1, T, D)
        if keep_attention:
            fill.put("attention", start, take("attention"), axis=1)  # (L, H, T, T)
    a = fill.arrays
    top_ids, top_logits, top_probs = _top_per_position(lm, torch.from_numpy(a["final_norm"][0]))
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
        top_ids=top_ids, top_logits=top_logits, top_probs=top_probs,
        kv_bytes_per_layer=bytes_per_layer(kv_cache),
        seconds=seconds,
    )
    return PrefillResult(prefill, kv_cache, last_logits)


def _top_per_position(lm: LanguageModel, normed: torch.Tensor, k: int = TOP_K_PER_POSITION, chunk: int = 256):
    """LM head over every position in chunks, keeping only the top k: never (T, V) at once."""
    head = lm.model.get_output_embeddings()
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
