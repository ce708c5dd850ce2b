"""Stage: the KV cache. What it holds (bytes by formula and as measured), what it saves (cache on
vs off, measured on the real model) and what it costs on real GPUs (the memory calculator).

GPU capacities are binary: the "80GB" on an H100 is 80 GiB = 80 * 2^30 B = 85,899,345,920 B
(memory chips are sized in powers of two), so `fit` works in GiB. Parameter counts are decimal
(8.2 billion = 8.2e9). `human_bytes` prints decimal units (147,456 B -> '147.5 KB') unless asked
for binary ones ('144.0 KiB').
Qwen3-8B, 16-bit: 2 (K and V) * 36 L * 8 Hkv * 128 Dh * 2 B = 147,456 B per token (about 147 KB).
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

from pipeline.core.checks import integer, number
from pipeline.core.errors import InputError
from pipeline.core.timing import compare_runs
from pipeline.model.dims import ModelDims, held_positions, kv_bytes_formula
from pipeline.model.interface import LanguageModel

GIB = 2**30  # bytes in one GiB, the unit GPU memory sizes are quoted in
CONFIG_PATH = Path(__file__).resolve().parents[2] / "assets" / "model_configs.json"
NO_CACHE_MAX_TOKENS = 1024  # the uncached run re-reads the whole sequence every step: keep it bounded


# ---- cache on vs off, measured -------------------------------------------------------------------
def _timed_step(lm: LanguageModel, fed: list[int], kv_cache=None, use_cache: bool = True):
    """One timed pass over `fed` (1, n). Returns (output, chosen token, seconds); reading the token
    waits for the device, so the time covers the real work."""
    t0 = time.perf_counter()
    out = lm.forward([fed], cache=kv_cache, use_cache=use_cache)
    token = int(out.logits[0, -1].argmax())
    return out, token, time.perf_counter() - t0


def with_cache(lm: LanguageModel, ids: list[int], n_steps: int) -> dict:
    """Step 0 is the prefill of the prompt; steps 1.. feed one token each (input (1, 1))."""
    run = {"tokens": [], "seconds": [], "tokens_fed": []}
    kv_cache = None
    for step in range(n_steps):
        fed = list(ids) if step == 0 else [run["tokens"][-1]]  # (T,) then (1,)
        out, token, took = _timed_step(lm, fed, kv_cache=kv_cache)
        kv_cache = out.cache
        _record(run, token, took, len(fed))
    return run


def without_cache(lm: LanguageModel, ids: list[int], n_steps: int) -> dict:
    """Every step recomputes the whole sequence so far (input (1, T + step))."""
    run = {"tokens": [], "seconds": [], "tokens_fed": []}
    for _ in range(n_steps):
        fed = list(ids) + run["tokens"]  # (T + step,)
        _, token, took = _timed_step(lm, fed, use_cache=False)
        _record(run, token, took, len(fed))
    return run


def _record(run: dict, token: int, seconds: float, n_fed: int) -> None:
    run["tokens"].append(token)
    run["seconds"].append(seconds)
    run["tokens_fed"].append(n_fed)


def compare(lm: LanguageModel, ids: list[int], n_steps: int = 16, repeats: int = 3, again: bool = True) -> dict:
    """{'cache': {...}, 'no_cache': {...}, 'same_tokens', 'speedup', 'tokens_computed', 'timing'}

    Both ways are run `repeats` times, alternately, and each step's time is the median over the
    repeats, so load on a shared machine hits both sides alike; 'timing' compares the totals
    (medians and ranges, see pipeline.core.timing). Tokens run through the model each way are counted
    too: that count does not depend on how busy the machine is. The cache does less work, so a result
    with it clearly slower contradicts the work: it is measured again with twice the repeats (`again`),
    and if it still does, its timing is marked noise.
    """
    if len(ids) + n_steps > NO_CACHE_MAX_TOKENS:
        raise InputError("n_steps", f"{len(ids):,} + {n_steps} tokens: the run without a cache is kept within "
                                    f"{NO_CACHE_MAX_TOKENS:,} tokens.")
    ons, offs = [], []
    for _ in range(repeats):
        ons.append(with_cache(lm, ids, n_steps))
        offs.append(without_cache(lm, ids, n_steps))
    on, off = _median_run(ons), _median_run(offs)
    timing = compare_runs([sum(r["seconds"]) for r in ons], [sum(r["seconds"]) for r in offs])
    if timing.contradicts_work and again:
        second = compare(lm, ids, n_steps, 2 * repeats, again=False)
        if second["timing"].contradicts_work:
            second["timing"] = replace(second["timing"], noise=True)
        return second
    return {"cache": on, "no_cache": off, "same_tokens": all(r["tokens"] == ons[0]["tokens"] for r in ons + offs),
            "speedup": 1 / timing.ratio, "timing": timing, "n_steps": n_steps, "repeats": repeats,
            "prompt_tokens": len(ids), "tokens_computed": {"cache": sum(on["tokens_fed"]),
                                                           "no_cache": sum(off["tokens_fed"])}}


def _median_run(runs: list[dict]) -> dict:
    """One run whose step times are the per-step medians of several identical runs."""
    return {"tokens": runs[0]["tokens"], "tokens_fed": runs[0]["tokens_fed"],
            "seconds": [statistics.median(s) for s in zip(*(r["seconds"] for r in runs))]}


# ---- what each layer holds ---------------------------------------------------------------------------
def position_bytes(dims: ModelDims) -> int:
    """Bytes one position takes in one layer: 2 (K and V) * Hkv * Dh * bytes. SmolLM2, float32: 2*3*64*4 = 1,536."""
    return kv_bytes_formula(1, dims.Hkv, dims.Dh, 1, dims.bytes_per_value)


def held_bytes(dims: ModelDims, n: int) -> list[int]:
    """(L,) bytes HF's cache holds per layer after n positions: all n in a full layer, the last window - 1
    in a sliding one (kv_tensors.held_positions). Gemma-3-270M, float32, n = 600: 511 * 2,048 B in a
    sliding layer, 600 * 2,048 B in a full one."""
    n = integer("n", n, 0, 10**9)
    return [held_positions(dims.window(i), n) * position_bytes(dims) for i in range(dims.L)]


def layer_holdings(dims: ModelDims, measured: list[int], tokens: int) -> list[dict]:
    """One row per layer: its window (None: full), the bytes its real cache tensors held (`measured`, e.g.
    prefill.kv_bytes_per_layer), the positions that is, and what it would hold keeping every one of the
    `tokens` positions or only its window (an engine that drops what a sliding layer can no longer read:
    the memory calculator's bytes_by_layer)."""
    if len(measured) != dims.L:
        raise InputError("measured", f"one byte count per layer: {len(measured)} for {dims.L} layers.")
    per = position_bytes(dims)
    windowed = bytes_by_layer(ModelShape.from_dims(dims), tokens, dims.bytes_per_value)
    return [{"layer": i, "window": dims.window(i), "bytes": int(b), "positions": int(b) // per,
             "all_positions_bytes": tokens * per, "window_bytes": windowed[i]} for i, b in enumerate(measured)]


# ---- the memory calculator for real models ----------------------------------------------------------
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
    layer_windows: tuple[int | None, ...] = ()  # (L,) each layer's window (None: full), where the layers are listed

    def __post_init__(self):
        number("params_b", self.params_b, 0, 1e5)
        for name in ("layers", "heads", "kv_heads", "head_dim", "context"):
            integer(name, getattr(self, name), 1, 10**5 if name != "context" else 10**9)
        integer("sliding_layers", self.sliding_layers, 0, self.layers)
        integer("sliding_window", self.sliding_window, 0, 10**9)
        if not isinstance(self.layer_windows, (tuple, list)) or self.layer_windows and (
                len(self.layer_windows) != self.layers or self.sliding_layers):
            raise InputError("layer_windows", f"one window (or null for a full layer) per layer ({self.layers}), "
                                              "instead of sliding_layers, not both.")
        for w in self.layer_windows:
            if w is not None:
                integer("layer_windows", w, 1, 10**9)
        object.__setattr__(self, "layer_windows", tuple(self.layer_windows))

    def windows(self) -> tuple[int | None, ...]:
        """(L,) positions each layer keeps at most (None: all). gpt-oss-20b: 12 x 128, then 12 x None."""
        if self.layer_windows:
            return self.layer_windows
        return (self.sliding_window,) * self.sliding_layers + (None,) * (self.layers - self.sliding_layers)

    @classmethod
    def from_dims(cls, dims, params_b: float = 0.0) -> "ModelShape":
        """The shape of a model whose ModelDims we hold (the one this app runs), windows per layer included."""
        windows = tuple(dims.window(i) for i in range(dims.L))
        return cls(dims.name, params_b, dims.L, dims.H, dims.Hkv, dims.Dh, dims.context_window,
                   layer_windows=windows if any(w is not None for w in windows) else ())


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
        "models": {m["name"]: ModelShape(**{k: tuple(v) if isinstance(v, list) else v for k, v in m.items()})
                   for m in data["models"]},
        "gpus": {g["name"]: g["memory_gib"] for g in data["gpus"]},  # name -> GiB
        "dtypes": data["dtypes"],  # cache precision -> bytes per value
        "weight_dtypes": data.get("weight_dtypes", data["dtypes"]),  # weight precision -> bytes per parameter
    }


def bytes_per_token(m: ModelShape, bytes_per_value: int) -> int:
    """Cache bytes one token adds to every layer: 2 * L * Hkv * Dh * bytes."""
    return kv_bytes_formula(m.layers, m.kv_heads, m.head_dim, 1, bytes_per_value)


def bytes_by_layer(m: ModelShape, tokens: int, bytes_per_value: int) -> list[int]:
    """(L,) cache bytes per layer for one conversation of `tokens` tokens, kept by an engine that drops what
    a sliding layer can no longer read: min(tokens, window) positions there, all of them in a full layer.
    Gemma-3-270M, 600 tokens, 16-bit: sliding layers 512 * 2*1*256*2 = 524,288 B, full ones 614,400 B."""
    tokens = integer("tokens", tokens, 0, 10**9)
    return [kv_bytes_formula(1, m.kv_heads, m.head_dim, tokens if w is None else min(tokens, w), bytes_per_value)
            for w in m.windows()]


def conversation_bytes(m: ModelShape, tokens: int, bytes_per_value: int) -> int:
    """Cache for one conversation; sliding-window layers stop growing at their window."""
    return sum(bytes_by_layer(m, tokens, bytes_per_value))


def fit(m: ModelShape, gpu_gib: float, tokens: int, kv_bytes_per_value: int, weight_bytes_per_param: float,
        reserve: float = 0.0) -> Fit:
    """How many `tokens`-long conversations fit beside the weights.

    Qwen3-8B on an 80 GiB GPU, 16-bit weights and cache, 4,096 tokens, no reserve:
      GPU 80 * 2^30 = 85,899,345,920 B; weights 8.2e9 * 2 = 16.4e9 B; free 69,499,345,920 B;
      one conversation 147,456 * 4,096 = 603,979,776 B (576 MiB) -> 115.07 -> 115.
    """
    number("gpu_gib", gpu_gib, 0, 1e6)
    integer("tokens", tokens, 0, 10**9)
    number("weight_bytes_per_param", weight_bytes_per_param, 0, 64)
    number("reserve", reserve, 0, 1)
    gpu = round(gpu_gib * GIB)
    weights = round(m.params_b * 1e9 * weight_bytes_per_param)
    free = round(gpu * (1 - reserve)) - weights
    conv = conversation_bytes(m, tokens, kv_bytes_per_value)
    return Fit(bytes_per_token(m, kv_bytes_per_value), conv, weights, gpu, free,
               max(0, free // conv) if conv else 0)


def human_bytes(n: float, binary: bool = False) -> str:
    """147456 -> '147.5 KB' (decimal units); binary=True: 147456 -> '144.0 KiB', 80 * 2**30 -> '80.0 GiB'."""
    n = number("bytes", n)
    step, units = (1024, ("B", "KiB", "MiB", "GiB", "TiB")) if binary else (1000, ("B", "KB", "MB", "GB", "TB"))
    for unit in units:
        if abs(n) < step or unit == units[-1]:
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= step
    return f"{n} {units[-1]}"
