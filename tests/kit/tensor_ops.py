"""Which ATen ops a piece of torch code runs, with its tensors' shapes: a static-shape step's launches depend on
nothing but its bucket (the graphed decode tests)."""
import contextlib

import torch


@contextlib.contextmanager
def logged_ops():
    """Inside: every ATen op run, appended to the yielded list as (op name, (shape of each tensor argument))."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    ops: list[tuple[str, tuple]] = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            shapes = tuple(tuple(a.shape) for a in tree_leaves((args, kwargs or {})) if isinstance(a, torch.Tensor))
            ops.append((str(func), shapes))
            return func(*args, **(kwargs or {}))

    with Log():
        yield ops
