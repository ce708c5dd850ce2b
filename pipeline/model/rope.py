"""Rotary position embedding (RoPE), written once: the frequencies, the cos/sin tables and the rotation.

Llama-style RoPE pairs dimension i with dimension i + Dh/2 (the "rotate half" layout) and turns that
pair by the angle  position * base ** (-2i / Dh).  HF writes the turn as
x*cos + rotate_half(x)*sin with rotate_half(x) = [-x_high, x_low]; `rotate` writes the same thing as
roll(x)*[-sin_low, sin_high] (one op instead of four; a sign flip is exact, so the same bits).

Works on numpy arrays and on torch tensors alike; this module imports neither torch nor the model,
so a stored run's RoPE page draws before torch has loaded. Shape letters: P positions, Dh head width.
"""
from __future__ import annotations

import numpy as np


def inv_freq(head_dim: int, base: float) -> np.ndarray:
    """(Dh/2,) radians per position for each frequency pair.  Dh=4, base=100 -> [1.0, 0.1]."""
    return base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)


def angles(positions, head_dim: int, base: float) -> np.ndarray:
    """(P, Dh/2) rotation angle in radians for every position and frequency pair."""
    pos = np.asarray(positions, dtype=np.float64)  # (P,)
    return pos[:, None] * inv_freq(head_dim, base)[None, :]  # (P, Dh/2)


def cos_sin(positions, head_dim: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin (P, Dh) in float64, each pair's angle repeated over both halves (HF's layout)."""
    a = angles(positions, head_dim, base)  # (P, Dh/2)
    return np.concatenate([np.cos(a), np.cos(a)], axis=-1), np.concatenate([np.sin(a), np.sin(a)], axis=-1)


def signed_sin(sin):
    """[-sin_low, sin_high] (..., Dh) from sin (..., Dh): the sin table `rotate` takes."""
    half = sin.shape[-1] // 2
    out = sin.copy() if isinstance(sin, np.ndarray) else sin.clone()
    out[..., :half] = -sin[..., :half]
    return out


def rotate(x, cos, sin_signed):
    """x (..., P, Dh) turned by its positions: x*cos + rotate_half(x)*sin, with cos and
    sin_signed = signed_sin(sin) of shape (P, Dh). Numpy or torch; the result has x's type.

        cos, sin = cos_sin([1], 4, 100)
        rotate(np.array([[1., 0, 0, 0]]), cos, signed_sin(sin))  # [[cos 1, 0, sin 1, 0]]
    """
    half = x.shape[-1] // 2
    rolled = np.roll(x, half, axis=-1) if isinstance(x, np.ndarray) else x.roll(half, -1)  # [x_high, x_low]
    return x * cos + rolled * sin_signed


def model_tables(rotary_emb, n: int, device, dtype):
    """cos and signed_sin (n, Dh) torch tensors for positions 0..n-1 from the model's own rotary
    embedding module (so exactly the values HF uses at each position)."""
    import torch

    positions = torch.arange(n, device=device)[None]  # (1, n)
    with torch.inference_mode():
        cos, sin = rotary_emb(torch.empty(0, device=device, dtype=dtype), positions)  # (1, n, Dh)
        return cos[0], signed_sin(sin[0])
