"""KV-cache memory calculator for real model configurations (assets/model_configs.json).

Units are decimal (1 KB = 1,000 B, 1 GB = 10^9 B), as GPU vendors print them.
Qwen3-8B, 16-bit: 2 (K and V) * 36 L * 8 Hkv * 128 Dh * 2 B = 147,456 B per token (about 147 KB).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .kv import kv_bytes_formula

CONFIG_PATH = Path(__file__).resolve().parent.parent / "assets" / "model_configs.json"


@dataclass(frozen=True)
class ModelShape:
    name: str
    params_b: float  # total parameters, billions
    layers: int  # L
    heads: int  # H
    kv_heads: int  # Hkv
    head_dim: int  # Dh
    context: int
    sliding_layers: int = 0  # layers that keep only the last `sliding_window` positions
    sliding_window: int = 0


@dataclass(frozen=True)
class Fit:
    bytes_per_token: int  # every layer holding the token
    conversation_bytes: int  # one conversation of `tokens` tokens
    weights_bytes: int
    gpu_bytes: int
    free_bytes: int  # left for the cache after weights and the reserve (may be negative)
    conversations: int  # whole conversations that fit (0 when the weights alone do not fit)


def load_configs(path: Path = CONFIG_PATH) -> dict:
    data = json.loads(Path(path).read_text())
    return {
        "models": {m["name"]: ModelShape(**m) for m in data["models"]},
        "gpus": {g["name"]: g["memory_gb"] for g in data["gpus"]},
        "dtypes": data["dtypes"],  # cache precision -> bytes per value
        "weight_dtypes": data.get("weight_dtypes", data["dtypes"]),  # weight precision -> bytes per parameter
    }


def bytes_per_token(m: ModelShape, bytes_per_value: int) -> int:
    """Cache bytes one token adds to every layer: 2 * L * Hkv * Dh * bytes."""
    return kv_bytes_formula(m.layers, m.kv_heads, m.head_dim, 1, bytes_per_value)


def conversation_bytes(m: ModelShape, tokens: int, bytes_per_value: int) -> int:
    """Cache for one conversation; sliding-window layers stop growing at their window."""
    full = m.layers - m.sliding_layers
    total = kv_bytes_formula(full, m.kv_heads, m.head_dim, tokens, bytes_per_value)
    if m.sliding_layers:
        total += kv_bytes_formula(m.sliding_layers, m.kv_heads, m.head_dim, min(tokens, m.sliding_window),
                                  bytes_per_value)
    return total


def fit(m: ModelShape, gpu_gb: float, tokens: int, kv_bytes_per_value: int, weight_bytes_per_param: float,
        reserve: float = 0.0) -> Fit:
    """How many `tokens`-long conversations fit beside the weights.

    Qwen3-8B on an 80 GB GPU, 16-bit weights and cache, 4,096 tokens, no reserve:
      weights 8.2e9 * 2 = 16.4 GB; free 63.6 GB; one conversation 147,456 * 4,096 = 0.604 GB -> 105.
    """
    gpu = round(gpu_gb * 1e9)
    weights = round(m.params_b * 1e9 * weight_bytes_per_param)
    free = round(gpu * (1 - reserve)) - weights
    conv = conversation_bytes(m, tokens, kv_bytes_per_value)
    return Fit(bytes_per_token(m, kv_bytes_per_value), conv, weights, gpu, free,
               max(0, free // conv) if conv else 0)


def human_bytes(n: float) -> str:
    """147456 -> '147.5 KB' (decimal units)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n} TB"
