"""Prefill: the whole prompt in one forward pass, with every internal tensor captured.

Shape letters used throughout: L layers, H query heads, Hkv key/value heads, T positions,
D model width, Dh head width, V vocabulary, K top candidates kept per position.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

from .capture import capture
from .kv import bytes_per_layer, cache_layers

# Past this many prompt tokens the full attention tensor (L, H, T, T) is not kept: at 512 tokens
# it is 30*9*512*512*4 B = 283 MB for SmolLM2. Longer prompts get one layer at a time on demand,
# recomputed exactly from the captured post-RoPE q and k (see `attention_for_layer`).
FULL_ATTENTION_MAX_TOKENS = 512
TOP_K_PER_POSITION = 10  # candidates kept for every position (logit-lens-style views need only a few)


@dataclass
class Prefill:
    ids: list[int]
    embeddings: np.ndarray  # (T, D) rows of the embedding table
    hidden_states: np.ndarray  # (L+1, T, D) residual stream; [0] = embeddings, [i] = after block i
    attn_out: np.ndarray  # (L, T, D) attention's write to the residual stream
    mlp_out: np.ndarray  # (L, T, D) MLP's write to the residual stream
    q_rot: np.ndarray  # (L, H, T, Dh) queries after RoPE
    k_rot: np.ndarray  # (L, Hkv, T, Dh) keys after RoPE (exactly what the KV cache stores)
    v: np.ndarray  # (L, Hkv, T, Dh) values
    attention: np.ndarray | None  # (L, H, T, T) or None past FULL_ATTENTION_MAX_TOKENS
    final_norm: np.ndarray  # (T, D) last hidden state after the final RMSNorm
    last_logits: np.ndarray  # (V,) scores for the token after the prompt
    top_ids: np.ndarray  # (T, K) best next-token ids at every position
    top_logits: np.ndarray  # (T, K)
    top_probs: np.ndarray  # (T, K) softmax probabilities (temperature 1)
    kv_bytes_per_layer: list[int] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def T(self) -> int:
        return len(self.ids)


def _names(n_layers: int, keep_attention: bool) -> list[str]:
    """Keys and values are not hooked: the KV cache holds them exactly, after RoPE, for any model."""
    names = ["embed", "rotary.cos", "rotary.sin", "final_norm"]
    for i in range(n_layers):
        names += [f"blocks.{i}.{p}" for p in ("attn.q", "attn.out", "mlp.out", "out")]
        if keep_attention:
            names.append(f"blocks.{i}.attn.pattern")
    return names


def _heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(1, T, n*Dh) -> (n, T, Dh)"""
    _, T, width = x.shape
    return x.view(T, n_heads, width // n_heads).transpose(0, 1)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (n, T, Dh) rotated by position: x*cos + rotate_half(x)*sin, cos/sin (T, Dh)."""
    return x * cos + _rotate_half(x) * sin


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy()


# Past the same size the captured tensors are stored in float16 (half the memory; shown values
# keep 3 significant digits, plenty for charts). Shorter prompts keep exact float32.
COMPACT_DTYPE = torch.float16


def _take_stack(rec: dict, names: list[str], transform=None) -> np.ndarray:
    """Stack one tensor per name into a new leading axis, releasing each capture as it is copied."""
    first = None
    for i, name in enumerate(names):
        t = rec.pop(name)[0][0]  # drop the batch axis
        t = transform(t) if transform else t
        if first is None:
            first = np.empty((len(names), *t.shape), dtype=_np_dtype(t))
        first[i] = t.numpy()
    return first


def _cache_stack(cache, which: int, dtype: torch.dtype) -> np.ndarray:
    """Keys (which=0) or values (1) of every layer: (L, Hkv, T, Dh) on the CPU."""
    return np.stack([kv[which][0].to("cpu", dtype=dtype).numpy() for kv in cache_layers(cache)])


@contextmanager
def attention_implementation(model, name: str):
    """Switch the attention kernel for one forward pass. Past FULL_ATTENTION_MAX_TOKENS the weights
    are not kept, so SDPA avoids building (H, T, T) per layer at all; eager is restored after."""
    before = model.config._attn_implementation
    if name != before:
        model.set_attn_implementation(name)
    try:
        yield
    finally:
        if model.config._attn_implementation != before:
            model.set_attn_implementation(before)


def _np_dtype(t: torch.Tensor):
    return np.float16 if t.dtype == torch.float16 else np.float32


def run_prefill(lm, ids: list[int], keep_attention: bool | None = None):
    """Run the prompt once, capturing everything. Returns (Prefill, cache, last_logits tensor)."""
    cfg = lm.config
    L, H = cfg.num_hidden_layers, cfg.num_attention_heads
    T = len(ids)
    long_prompt = T > FULL_ATTENTION_MAX_TOKENS
    keep_attention = not long_prompt if keep_attention is None else keep_attention
    input_ids = torch.tensor([ids], device=lm.device)  # (1, T)
    store = COMPACT_DTYPE if long_prompt else torch.float32
    with torch.inference_mode(), capture(lm.model, _names(L, keep_attention), lock=lm.lock, store_dtype=store) as rec, \
            attention_implementation(lm.model, "eager" if keep_attention else "sdpa"):
        t0 = time.perf_counter()
        out = lm.model(input_ids=input_ids, use_cache=True, logits_to_keep=1)
        lm.calls += 1
        last_logits = out.logits[0, -1].float().cpu()  # (V,)
        seconds = time.perf_counter() - t0
        cache = out.cache  # DynamicCache: per layer (1, Hkv, T, Dh) keys and values
        top_ids, top_logits, top_probs = _top_per_position(lm, rec["final_norm"][0][0])
    cos, sin = rec.pop("rotary.cos")[0][0], rec.pop("rotary.sin")[0][0]  # (T, Dh)
    rope_q = lambda q: apply_rope(_heads(q[None].float(), H), cos.float(), sin.float()).to(q.dtype)
    blocks = lambda part: [f"blocks.{i}.{part}" for i in range(L)]
    embeddings = rec.pop("embed")[0][0].numpy()  # (T, D)
    hidden = np.concatenate([embeddings[None], _take_stack(rec, blocks("out"))])  # (L+1, T, D)
    prefill = Prefill(
        ids=list(ids),
        embeddings=embeddings,
        hidden_states=hidden,
        attn_out=_take_stack(rec, blocks("attn.out")),  # (L, T, D)
        mlp_out=_take_stack(rec, blocks("mlp.out")),  # (L, T, D)
        q_rot=_take_stack(rec, blocks("attn.q"), rope_q),  # (L, H, T, Dh)
        k_rot=_cache_stack(cache, 0, store),  # (L, Hkv, T, Dh) keys after RoPE, as the cache holds them
        v=_cache_stack(cache, 1, store),  # (L, Hkv, T, Dh)
        attention=_take_stack(rec, blocks("attn.pattern")) if keep_attention else None,  # (L, H, T, T)
        final_norm=rec.pop("final_norm")[0][0].numpy(),  # (T, D)
        last_logits=last_logits.numpy(),
        top_ids=top_ids,
        top_logits=top_logits,
        top_probs=top_probs,
        kv_bytes_per_layer=bytes_per_layer(cache),
        seconds=seconds,
    )
    return prefill, cache, last_logits.to(lm.device)


def _top_per_position(lm, normed: torch.Tensor, k: int = TOP_K_PER_POSITION, chunk: int = 256):
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
    return _np(torch.cat(ids)).astype(np.int64), _np(torch.cat(logits)), _np(torch.cat(probs))


def attention_for_layer(prefill: Prefill, layer: int, first_row: int = 0) -> np.ndarray:
    """(H, T - first_row, T) attention weights of one layer for query rows first_row..T-1:
    softmax(q k^T / sqrt(Dh) + causal mask), in float32.

    Uses the stored pattern when kept; otherwise recomputes just those rows from the captured
    post-RoPE q and k. Query head h reads key/value head h // (H // Hkv) (grouped-query attention).
    """
    if prefill.attention is not None:
        return np.ascontiguousarray(prefill.attention[layer][:, first_row:], dtype=np.float32)
    q = prefill.q_rot[layer][:, first_row:].astype(np.float32)  # (H, W, Dh)
    k = prefill.k_rot[layer].astype(np.float32)  # (Hkv, T, Dh)
    k = np.repeat(k, q.shape[0] // k.shape[0], axis=0)  # (H, T, Dh)
    scores = q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(q.shape[-1]))  # (H, W, T)
    T = scores.shape[-1]
    future = np.arange(T)[None, :] > np.arange(first_row, T)[:, None]  # (W, T) key after its query
    scores[:, future] = -np.inf
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights  # (H, W, T)


def kv_snapshot(cache) -> list[tuple[np.ndarray, np.ndarray]]:
    """Copy of the cache as numpy: per layer (K, V), each (Hkv, T, Dh)."""
    return [(_np(k[0]), _np(v[0])) for k, v in cache_layers(cache)]
