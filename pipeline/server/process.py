"""Settings of a server's process, made before the model loads (app.py calls both at every script run; each
takes effect once per process)."""
from __future__ import annotations

import ctypes
import os
import sys

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def wait_passively() -> None:
    """OpenMP threads that wait by sleeping, not spinning (read when torch loads). A server shares its cores with
    page scripts (and here with the browsers of a load test); with spinning waits a batch of 8 chat runs took 233 s
    beside two busy processes instead of 17 s alone, with passive waits 34 s (2 cores)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def give_freed_arrays_back() -> None:
    """glibc gives arrays over 128 KiB back to the system when they are freed. By default it raises that threshold
    as big arrays come and go, and a long prompt's freed temporaries then stayed in the heap: one 4,000-token run
    left the server at 2.1 GB instead of 1.8 GB and a session's next long prompts peaked at 3.3 GB
    (bench/long_prompt_memory.py, docs/memory.md). The price: each big array is mapped and
    page-faulted in afresh (a test process, which needs no memory back, keeps glibc's default: tests/conftest.py)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, 128 * 1024)  # fixed (no dynamic raise)
        except (OSError, AttributeError):
            pass


# Lines libraries log at import that concern no user of this app: (logger, start of the message). Each is matched
# exactly, so any other line from the same logger (a real problem) still shows.
#   torchao: its optional CUDA kernels (_C_mxfp8, _C_cutlass_90a) do not load on a machine without CUDA 12.8+;
#            the int8 weights this app builds do not use them.
#   torch's _pytree: torchao registers its enums the way torch 2.11 deprecated; nothing the user can change.
LIBRARY_NOISE = (
    ("torchao", "Failed to load "),
    ("torch.utils._pytree", "%s is an Enum subclass and is now natively supported by torch.compile"),
)


class _DropLines:
    """A logging filter that drops the records whose message (before % formatting) starts with `start`; for
    torchao's line, only about one of its own kernel libraries (.so files in its folder)."""

    def __init__(self, start: str):
        self.start = start

    def filter(self, record) -> bool:
        message = str(record.msg)
        if not message.startswith(self.start):
            return True
        if self.start == "Failed to load ":
            return not ("torchao" in message and "/_C" in message and ".so" in message)
        return False


def quiet_library_noise() -> None:
    """Drop LIBRARY_NOISE from the command line's stderr and the server's log (once per process; before torch or
    transformers is imported, since the lines come at import). A filter on each logger, not a level: every other
    warning of torch and torchao still shows."""
    import logging

    for name, start in LIBRARY_NOISE:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropLines) and f.start == start for f in logger.filters):
            logger.addFilter(_DropLines(start))
