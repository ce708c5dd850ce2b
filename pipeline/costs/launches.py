"""How many separate operations a pass runs. Each is one trip through torch's dispatcher on a CPU and at least one
kernel launch on a GPU, whatever its size, so a small model's decode step, about a thousand of them for a few
million multiply-adds each, can be held by their count rather than by its bytes or FLOPs: the launch-bound regime
(what a CUDA graph removes: its replay launches the whole step at once).

    ops = operations(lambda: lm.forward([[token]]))   # Operations: .total 1,097 for SmolLM2, .by_name {'mul': 275, ...}
    ops.total / lm.dims.L                             # 36.6 a layer

Counted: every ATen op that computes or copies (a matmul, an add, a norm's mean, a cast to another dtype).
Not counted: views (a transpose, a slice, a reshape that keeps its storage), a cast to the dtype a tensor already
has, bare allocations: they launch nothing. An op whose kernel launches several (a split matmul) counts once, so the
total is a floor on the launches. The count follows the code and the layer count, not the width
(test_launches.py); it should not depend on the device either (a CUDA test checks that where one runs).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

HOST_READ = "_local_scalar_dense"  # a tensor's value read on the host (.item(), int(t)): on a GPU, a wait for it
NO_KERNEL = frozenset({"empty", "empty_strided", "empty_like", "lift_fresh", "detach", "detach_", "alias",
                       HOST_READ, "set_", "resize_", "_reshape_alias", "is_same_size", "size", "stride",
                       "_unsafe_view"})  # _unsafe_view: a view made without the view's bookkeeping
DEVICES = frozenset({"cpu", "cuda", "mps", "xpu"})
MAYBE_VIEW = frozenset({"to", "_to_copy", "reshape", "contiguous", "flatten", "type_as"})  # a view or a copy


@dataclass(frozen=True)
class Operations:
    by_name: dict[str, int]  # op name -> times run; a cast is named by its target: 'to bfloat16'
    host_reads: int = 0  # values read back on the host (not counted as operations): each waits for a GPU

    @property
    def total(self) -> int:
        return sum(self.by_name.values())

    def casts(self) -> int:
        """The ops that change a tensor's dtype."""
        return sum(n for name, n in self.by_name.items() if name.startswith("to ") and name[3:] not in DEVICES)


def _is_copy(out, first) -> bool:
    import torch

    if not isinstance(out, torch.Tensor) or not isinstance(first, torch.Tensor):
        return False
    return out.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()


def _copy_name(name: str, out, first) -> str:
    """'to bfloat16' for a cast, 'to cpu' for a move between devices, else 'clone' (a reshape's copy)."""
    if out.dtype != first.dtype:
        return f"to {str(out.dtype).removeprefix('torch.')}"
    return f"to {out.device.type}" if out.device != first.device else "clone"


def operations(run: Callable[[], object]) -> Operations:
    """The operations `run()` makes torch run (see the module's docstring for what counts)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: Counter[str] = Counter()

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func._opname
            if name in MAYBE_VIEW:
                if args and _is_copy(out, args[0]):
                    seen[_copy_name(name, out, args[0])] += 1
            elif name == HOST_READ:
                reads[0] += 1
            elif not func.is_view and name not in NO_KERNEL:
                seen[name] += 1
            return out

    reads = [0]
    with Count():
        run()
    return Operations(dict(seen), reads[0])
