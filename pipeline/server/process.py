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
    (bench/long_prompt_memory.py, README "Memory for one user"). The price: each big array is mapped and
    page-faulted in afresh (a test process, which needs no memory back, keeps glibc's default: tests/conftest.py)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, 128 * 1024)  # fixed (no dynamic raise)
        except (OSError, AttributeError):
            pass
