"""This machine's two ceilings, measured: matrix-multiply FLOP/s at the model's own shapes and memory
bandwidth (a large copy). Medians of repeats, with their range; cached per device and model in a small JSON
under the cache folder (`serving/ceilings.json`), measured again only when asked.

    c = ceilings(lm)              # cached, or measured once (~2-10 s on a CPU)
    c.flops_per_s, c.bytes_per_s  # the roof: min(flops_per_s, intensity * bytes_per_s)
"""
from __future__ import annotations

import json
import math
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field

from pipeline.core.files import write_atomic
from pipeline.model.dims import ModelDims
from pipeline.model.weights_cache import cache_root

PREFILL_ROWS = 256  # T of the matmul shapes: a prompt's worth of rows, enough to keep the arithmetic units busy
COPY_BYTES = 256 * 2**20  # the copied tensor: far past any CPU cache, so the copy runs at memory speed
REPEATS = 5


@dataclass(frozen=True)
class Measured:
    name: str  # 'q,k,v (T x D) @ (D x (H+2Hkv)Dh)', 'copy 256 MiB'
    median: float  # per second: FLOPs (a matmul) or bytes (the copy)
    low: float
    high: float


@dataclass(frozen=True)
class Ceilings:
    device: str  # what was measured on: 'cpu (x86_64, 2 threads)', 'cuda (NVIDIA H200)'
    model: str
    matmuls: list[Measured]
    copy: Measured
    repeats: int
    measured_at: float = field(default=0.0)  # time.time()

    @property
    def flops_per_s(self) -> float:
        """The compute roof: the fastest of the model's matmul shapes (medians)."""
        return max(m.median for m in self.matmuls)

    @property
    def bytes_per_s(self) -> float:
        return self.copy.median

    @property
    def balance(self) -> float:
        """FLOPs per byte where the two roofs meet: a pass below it is limited by memory, above by compute."""
        return self.flops_per_s / self.bytes_per_s

    def roof(self, intensity: float) -> float:
        """The most FLOP/s a pass of this many FLOPs per byte can reach here."""
        return min(self.flops_per_s, intensity * self.bytes_per_s)

    def to_json(self) -> dict:
        return {"device": self.device, "model": self.model, "flops_per_s": self.flops_per_s,
                "bytes_per_s": self.bytes_per_s, "repeats": self.repeats, "measured_at": self.measured_at,
                "matmuls": [asdict(m) for m in self.matmuls], "copy": asdict(self.copy)}

    @classmethod
    def from_json(cls, d: dict) -> "Ceilings":
        return cls(d["device"], d["model"], [Measured(**m) for m in d["matmuls"]], Measured(**d["copy"]),
                   d["repeats"], d.get("measured_at", 0.0))


def device_name(device) -> str:
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"{device.type} ({platform.machine()}, {torch.get_num_threads()} threads)"


def matmul_shapes(m: ModelDims, T: int = PREFILL_ROWS) -> list[tuple[str, int, int, int]]:
    """(name, rows, inner, columns) of the model's own matrix multiplies at T rows."""
    D_mlp = m.D_mlp or 4 * m.D
    qkv = (m.H + 2 * m.Hkv) * m.Dh
    return [(f"q,k,v ({T} x {m.D}) @ ({m.D} x {qkv})", T, m.D, qkv),
            (f"MLP up ({T} x {m.D}) @ ({m.D} x {D_mlp})", T, m.D, D_mlp),
            (f"MLP down ({T} x {D_mlp}) @ ({D_mlp} x {m.D})", T, D_mlp, m.D),
            (f"LM head ({T} x {m.D}) @ ({m.D} x {m.V})", T, m.D, m.V)]


def _timed(run, device, repeats: int, work: float, at_least_s: float = 0.05) -> tuple[float, float, float]:
    """(median, low, high) of work / seconds over `repeats` timings, after a warm-up call. Each timing runs
    `run` often enough to last `at_least_s` (a 2 ms matmul timed once is mostly the clock and the scheduler)."""
    import torch

    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    run()
    sync()  # a GPU returns before the work is done: wait for it
    calls = max(1, math.ceil(at_least_s / max(time.perf_counter() - t0, 1e-6)))
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            run()
        sync()
        rates.append(calls * work / (time.perf_counter() - t0))
    return statistics.median(rates), min(rates), max(rates)


def _matmul(name: str, rows: int, inner: int, cols: int, dtype, device, repeats: int) -> Measured:
    import torch

    a = torch.randn(rows, inner, dtype=dtype, device=device)
    b = torch.randn(inner, cols, dtype=dtype, device=device)
    out = torch.empty(rows, cols, dtype=dtype, device=device)
    return Measured(name, *_timed(lambda: torch.matmul(a, b, out=out), device, repeats, 2.0 * rows * inner * cols))


def _copy(copy_bytes: int, device, repeats: int) -> Measured:
    import torch

    src = torch.ones(copy_bytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    moved = 2.0 * src.numel() * 4  # read once, written once
    return Measured(f"copy {copy_bytes / 2**20:,.0f} MiB", *_timed(lambda: dst.copy_(src), device, repeats, moved))


def measure(m: ModelDims, device, repeats: int = REPEATS, copy_bytes: int = COPY_BYTES,
            T: int = PREFILL_ROWS) -> Ceilings:
    import torch

    dtype = getattr(torch, m.dtype)
    with torch.inference_mode():
        matmuls = [_matmul(name, rows, inner, cols, dtype, device, repeats)
                   for name, rows, inner, cols in matmul_shapes(m, T)]
        copy = _copy(copy_bytes, device, repeats)
    return Ceilings(device_name(device), m.name, matmuls, copy, repeats, time.time())


def cache_file():
    return cache_root() / "serving" / "ceilings.json"


def cached(m: ModelDims, device) -> Ceilings | None:
    """What was measured before on this device for this model, or None."""
    try:
        stored = json.loads(cache_file().read_text(encoding="utf-8"))
        return Ceilings.from_json(stored[f"{device_name(device)} | {m.name}"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def ceilings(m: ModelDims, device, refresh: bool = False, **kw) -> Ceilings:
    """The cached ceilings, or measured now (and cached) when there are none or `refresh`."""
    found = None if refresh else cached(m, device)
    if found is not None:
        return found
    c = measure(m, device, **kw)
    path = cache_file()
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        stored = {}
    stored[f"{c.device} | {m.name}"] = c.to_json()
    try:
        os.makedirs(path.parent, exist_ok=True)
        write_atomic(path, lambda f: json.dump(stored, f, indent=1), text=True)
    except OSError:
        pass  # a read-only cache folder: the measurement is still returned, only not kept
    return c
