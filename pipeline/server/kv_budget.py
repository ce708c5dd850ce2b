"""The KV-cache bytes the room's running batch may reserve (RunQueue's admission: each request reserves the bytes
its cache reaches at its longest), named by the device that holds the cache.

- On a CPU: the fixed budget (run_queue.KV_BUDGET_BYTES, 512 MiB), as before: the machine's memory is shared
  with the app, the stores and everyone else, and is not measured.
- On CUDA: the device's free memory as torch.cuda.mem_get_info reports it when the budget is taken, less a margin
  (GPU_MARGIN_SHARE of the device's total memory: the step's activations, the CUDA graphs' pool, the allocator's
  slack, other processes), less the bytes of weights that will sit on the device but are not loaded yet (free
  memory already leaves out the weights that are resident). Never below 0 (the queue still admits the head of
  the line alone).

    budget = kv_budget("cuda")            # KVBudget(bytes=..., device="cuda:0", free_bytes=..., ...)
    RunQueue(kv_budget_bytes=budget.bytes)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pipeline.server.run_queue import KV_BUDGET_BYTES

GPU_MARGIN_SHARE = 0.10  # of the device's total memory, kept out of the KV budget on CUDA


@dataclass(frozen=True)
class KVBudget:
    """The admission budget and what it was taken from."""
    bytes: int  # the KV bytes the running batch may reserve
    device: str  # the device it measured: "cpu", or "cuda:0"
    free_bytes: int | None = None  # CUDA: the free memory measured (None on a CPU: nothing measured)
    total_bytes: int | None = None  # CUDA: the device's memory
    margin_bytes: int = 0  # kept out of the budget
    weights_bytes: int = 0  # weights still to load, kept out of the budget

    def describe(self) -> str:
        if self.free_bytes is None:
            return f"{self.bytes / 2**20:,.0f} MiB of KV cache on {self.device} (the fixed CPU budget)"
        return (f"{self.bytes / 2**30:,.2f} GiB of KV cache on {self.device}: {self.free_bytes / 2**30:,.2f} GiB "
                f"free of {self.total_bytes / 2**30:,.2f} GiB, less a {self.margin_bytes / 2**30:,.2f} GiB margin "
                f"and {self.weights_bytes / 2**30:,.2f} GiB of weights still to load")


def kv_budget(device, weights_to_load_bytes: int = 0,
              mem_get_info: Callable[[object], tuple[int, int]] | None = None) -> KVBudget:
    """The room's KV budget on `device`. weights_to_load_bytes: weights that will be resident on it but are not
    loaded yet. mem_get_info: (free, total) bytes of a CUDA device (torch.cuda.mem_get_info unless given)."""
    import torch  # not at import: the server's wiring loads before the pages need torch

    device = torch.device(device)
    if device.type != "cuda":
        return KVBudget(KV_BUDGET_BYTES, device.type)
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device() if mem_get_info is None else 0)
    free, total = (mem_get_info or torch.cuda.mem_get_info)(device)
    margin = int(GPU_MARGIN_SHARE * total)
    return KVBudget(max(0, free - margin - weights_to_load_bytes), str(device), free, total, margin,
                    weights_to_load_bytes)
