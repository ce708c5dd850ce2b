"""Stored runs: finished traces kept in memory (the hot ones) and optionally on disk, bounded in bytes,
one computation per request.

Identical requests (same messages, same options) share one trace: a second caller asking while the
first is still running waits for that run instead of starting another. The least recently used
traces are dropped once their captured arrays exceed `max_bytes`; the newest one is kept even when it
alone is over the bound (its caller is about to draw it).

The bookkeeping is our own, not `cachetools.LRUCache(maxsize, getsizeof)`: that refuses a value larger
than `maxsize` (ValueError) where we keep the newest run, it is not thread-safe (we need one lock around
the LRU and the single-flight table anyway), and it is not installed here; what it would replace is a
dozen lines.
"""
from __future__ import annotations

import numbers
import sys
import threading
from collections import OrderedDict
from typing import Callable, Hashable

DEFAULT_MAX_BYTES = 1_200 * 2**20  # a few long runs or dozens of short ones; the server stays under ~3 GB


def deep_size(obj) -> int:
    """Bytes an object holds: `nbytes` for arrays and anything that counts its own (a Trace, a tensor),
    sys.getsizeof for plain values, added up through lists, tuples, sets, dicts and objects' fields;
    each object counted once. A list of 3 floats -> 56 + 24 * 3 = 128 on CPython."""
    total, seen, todo = 0, set(), [obj]
    while todo:
        o = todo.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        own = getattr(o, "nbytes", None)
        if isinstance(own, numbers.Integral) and not isinstance(o, type):
            total += own
            continue
        total += sys.getsizeof(o)
        if isinstance(o, (str, bytes, bytearray, int, float, complex, bool, type(None), type)):
            continue
        if isinstance(o, dict):
            todo.extend(o.keys())
            todo.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            todo.extend(o)
        else:
            if hasattr(o, "__dict__"):
                todo.append(vars(o))
            todo.extend(getattr(o, name) for name in getattr(type(o), "__slots__", ()) if hasattr(o, name))
    return total


class RunStore:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, size_of: Callable[[object], int] = lambda t: t.nbytes,
                 disk=None):
        self.max_bytes = max_bytes
        self.size_of = size_of
        self.disk = disk  # an optional store behind the memory (stores.SharedStore): runs survive restarts,
        # replicas share them; it may send what memory holds again (a Redis that restarted without it)
        self._items: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()  # least recently used first
        self._running: dict[Hashable, threading.Event] = {}
        self._bytes = 0  # the sizes of what _items holds, added up
        self._lock = threading.Lock()
        if disk is not None:
            disk.attach_memory(self.items)

    @property
    def bytes_held(self) -> int:
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def values(self) -> list:
        """What memory holds now, least recently used first (nothing is read from disk)."""
        with self._lock:
            return [item[0] for item in self._items.values()]

    def items(self) -> list[tuple[Hashable, object]]:
        """(key, result) of what memory holds now, least recently used first."""
        with self._lock:
            return [(key, item[0]) for key, item in self._items.items()]

    def peek(self, key: Hashable, disk: bool = False):
        """The stored result for `key`, or None; never runs anything. disk=True also looks on disk
        (and keeps what it finds in memory)."""
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
                return item[0]
        found = self.disk.get(key) if disk and self.disk is not None else None
        if found is not None:
            self._put(key, found)
        return found

    def get_or_run(self, key: Hashable, run: Callable[[], object]):
        """The stored result for `key`, or `run()`'s, computed once however many callers ask at once."""
        while True:
            with self._lock:
                if key in self._items:
                    self._items.move_to_end(key)
                    return self._items[key][0]
                waiting = self._running.get(key)
                if waiting is None:
                    done = self._running[key] = threading.Event()
                    break
            waiting.wait()  # another caller is computing it; then look again (it may have failed)
        try:
            result = self.disk.get(key) if self.disk is not None else None
            if result is None:
                result = run()
                if self.disk is not None:
                    self.disk.put(key, result)
            self._put(key, result)
            return result
        finally:
            with self._lock:
                self._running.pop(key, None)
            done.set()

    def put(self, key: Hashable, result) -> None:
        """Keep a result computed elsewhere (a batch of several runs), on disk too."""
        if self.disk is not None:
            self.disk.put(key, result)
        self._put(key, result)

    def _put(self, key: Hashable, result) -> None:
        size = int(self.size_of(result))
        with self._lock:
            old = self._items.pop(key, None)
            self._bytes += size - (old[1] if old is not None else 0)
            self._items[key] = (result, size)
            while self._bytes > self.max_bytes and len(self._items) > 1:
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
