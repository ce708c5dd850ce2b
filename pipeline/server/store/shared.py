"""Which store keeps finished work behind a server's memory: the local folder (the default), or Redis.

Both implement `SharedStore`: `get` (None for a miss, never an error), `put` (never raises), `problem`
(why it is not being used now, in words, or None), `kept_local(key)` (why a value stays in this
process only, or None), `attach_memory(held)` (what the memory in front of it holds, for a store that can
lose values to send them again: Redis after a restart). `TPE_STORE=redis://:PASSWORD@HOST:PORT/0` picks
Redis (`./run.sh room-store` prints the URL); unset or `disk`, the folder. TPE_STORE_MAX_RUN_MB bounds one run
in Redis (default 64 MB).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Hashable, Protocol

from pipeline.core.errors import InputError

STORE_ENV = "TPE_STORE"
MAX_RUN_ENV = "TPE_STORE_MAX_RUN_MB"  # a run larger than this, compressed, stays in its server's memory (default 64)


class SharedStore(Protocol):
    problem: str | None

    def get(self, key: Hashable): ...

    def put(self, key: Hashable, obj) -> None: ...

    def kept_local(self, key: Hashable) -> str | None: ...

    def attach_memory(self, held: Callable[[], list[tuple[Hashable, object]]]) -> None: ...


def store_url() -> str | None:
    """TPE_STORE's Redis URL, or None for the local folder; InputError for anything else."""
    url = os.environ.get(STORE_ENV, "").strip()
    if url in ("", "disk"):
        return None
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise InputError(STORE_ENV, f"must be 'disk' or a redis:// URL, not {url.split(':', 1)[0]!r}...")
    return url


def runs_store(folder: Path) -> SharedStore:
    """Where finished runs go behind memory: Redis when TPE_STORE names it, else `folder` on disk."""
    from pipeline.server.store.disk import DiskStore

    url = store_url()
    if url is None:
        return DiskStore(folder)
    from pipeline.server.store.redis_store import RedisStore

    limit = os.environ.get(MAX_RUN_ENV, "").strip()
    try:
        max_bytes = int(float(limit) * 2**20) if limit else None
    except ValueError:
        raise InputError(MAX_RUN_ENV, f"must be a number of megabytes, not {limit[:20]!r}") from None
    return RedisStore(url, prefix="runs", max_value_bytes=max_bytes)


RESULTS_MAX_BYTES = 64 * 2**20  # the other results kept on disk (prompt-caching scenarios: ~0.1 MB each)


def results_store(shared: Callable[[Hashable], bool], folder: Path) -> SharedStore:
    """Behind the store of other results, for the keys `shared(key)` accepts (the prompt-caching scenarios):
    Redis when TPE_STORE names it, else `folder` on disk; either way replicas and a restarted server find what
    one of them played. The other results stay in their server's memory."""
    from pipeline.server.store.disk import DiskStore

    url = store_url()
    if url is None:
        return DiskStore(folder, max_bytes=RESULTS_MAX_BYTES, shares=shared)
    from pipeline.server.store.redis_store import RedisStore

    return RedisStore(url, prefix="results", shares=shared)
