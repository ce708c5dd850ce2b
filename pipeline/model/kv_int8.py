"""The KV cache in 8 bits: each key and value vector (one head, one position: Dh numbers) stored as int8
with its own float32 scale (absmax / 127), and the attention output's error against the float32 cache.

Bytes per head and position: Dh x 4 in float32, Dh x 2 in bf16, Dh + 4 in int8 (the scale). SmolLM2
(Dh = 64): 256 -> 68 bytes, 3.8x less; Gemma 3 (Dh = 256): 1,024 -> 260.

    q8, scale = quantize(keys)                      # keys (..., T, Dh) -> int8 (..., T, Dh), (..., T, 1)
    error = attention_error(prefill.q_rot, prefill.k_rot, prefill.v, dims)   # per layer, vs float32
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SCALE_BYTES = 4  # one float32 scale per vector


def quantize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(..., Dh) float -> int8 (..., Dh) and scales (..., 1): x ~ q * scale, |q| <= 127."""
    x = np.asarray(x, dtype=np.float32)
    scale = np.abs(x).max(axis=-1, keepdims=True) / 127.0
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)  # an all-zero vector: any scale, q = 0
    return np.clip(np.rint(x / scale), -127, 127).astype(np.int8), scale


def dequantize(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return q.astype(np.float32) * scale


def bytes_per_vector(Dh: int, bits: int) -> int:
    """One head's key (or value) at one position: 32 or 16 bits a number, or 8 bits and a scale."""
    return Dh * bits // 8 + (SCALE_BYTES if bits == 8 else 0)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, window: int | None, scale: float) -> np.ndarray:
    """Causal attention of one layer: q (H, T, Dh), k and v (Hkv, T, Dh) -> (H, T, Dh); query head h reads
    KV head h // (H / Hkv); a sliding layer sees its last `window` positions (itself included)."""
    H, T, _ = q.shape
    group = H // k.shape[0]
    k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)  # (H, T, Dh)
    scores = (q.astype(np.float64) @ k.transpose(0, 2, 1)) * scale  # (H, T, T)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    hidden = (j > i) | ((i - j >= window) if window else False)
    scores = np.where(hidden, -np.inf, scores)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return weights @ v


@dataclass(frozen=True)
class KVError:
    """The attention output with int8 keys and values against float32 ones, per layer."""

    relative: tuple[float, ...]  # (L,) ||out_int8 - out_fp32|| / ||out_fp32|| over every head and position
    max_abs: tuple[float, ...]  # (L,) the largest difference of one number
    kv_rel: float  # ||kv_int8 - kv|| / ||kv|| over every layer: the stored numbers' own error
    bytes_fp32: int  # the whole cache of these T positions (every layer, K and V)
    bytes_bf16: int
    bytes_int8: int


def attention_error(q_rot: np.ndarray, k_rot: np.ndarray, v: np.ndarray, dims) -> KVError:
    """q_rot (L, H, T, Dh), k_rot and v (L, Hkv, T, Dh) from a captured prefill; dims: ModelDims (windows).
    The softmax scale is Dh^-0.5 on both sides (what SmolLM2 uses; Gemma 3 270M's query_pre_attn_scalar is
    its Dh too)."""
    L, Hkv, T, Dh = k_rot.shape
    relative, max_abs, diff2, norm2 = [], [], 0.0, 0.0
    for i in range(L):
        k8, v8 = dequantize(*quantize(k_rot[i])), dequantize(*quantize(v[i]))
        exact = attention(q_rot[i], k_rot[i], v[i], dims.window(i), Dh ** -0.5)
        approx = attention(q_rot[i], k8, v8, dims.window(i), Dh ** -0.5)
        relative.append(float(np.linalg.norm(approx - exact) / max(np.linalg.norm(exact), 1e-30)))
        max_abs.append(float(np.abs(approx - exact).max()))
        diff2 += float(((k8 - k_rot[i]) ** 2).sum() + ((v8 - v[i]) ** 2).sum())
        norm2 += float((k_rot[i].astype(np.float64) ** 2).sum() + (v[i].astype(np.float64) ** 2).sum())
    vectors = 2 * L * Hkv * T
    return KVError(tuple(relative), tuple(max_abs), (diff2 / max(norm2, 1e-30)) ** 0.5,
                   vectors * bytes_per_vector(Dh, 32), vectors * bytes_per_vector(Dh, 16),
                   vectors * bytes_per_vector(Dh, 8))
