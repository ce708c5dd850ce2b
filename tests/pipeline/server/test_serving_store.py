"""Stored runs: the memory and disk stores, bounded in bytes, least recently used first; a download whose run was
dropped."""
import os
import pickle
import sys
import threading
import time

import numpy as np
import pytest

from pipeline.server.store.disk import DiskStore
from pipeline.server.store.memory import RunStore, deep_size


class Sized:
    def __init__(self, nbytes):
        self.nbytes = nbytes

# ---- stored runs ----------------------------------------------------------------------------------
def test_run_store_is_bounded_in_bytes_and_drops_the_least_recently_used():
    store = RunStore(max_bytes=100)
    for k in "abc":
        store.get_or_run(k, lambda: Sized(40))
    assert len(store) == 2 and store.peek("a") is None  # 120 > 100: 'a' went first
    store.peek("b")  # b used again
    store.get_or_run("d", lambda: Sized(40))
    assert store.peek("c") is None and store.peek("b") is not None and store.bytes_held == 80


def test_deep_size_adds_up_what_a_result_holds():
    rows = [{"name": "turn 1", "ms": 1.5}, {"name": "turn 2", "ms": 2.5}]
    by_hand = sys.getsizeof(rows) + sum(sys.getsizeof(r) + sum(sys.getsizeof(x) for kv in r.items() for x in kv)
                                        for r in rows) - sys.getsizeof("name") - sys.getsizeof("ms")  # keys shared
    assert deep_size(rows) == by_hand
    arr = np.zeros((100, 10), np.float32)
    assert deep_size(arr) == 4000 and deep_size({"a": arr, "b": arr}) == sys.getsizeof({"a": 0, "b": 0}) + \
        sys.getsizeof("a") + sys.getsizeof("b") + 4000  # one array under two keys counts once
    assert deep_size(Sized(123)) == 123  # a Trace counts its own arrays


def test_results_store_is_bounded_in_bytes_not_in_count():
    """result_store() once kept 256 results whatever their size (size_of=lambda r: 1): 256 branch traces
    of hundreds of MB each. Now small results are all kept and big ones evict each other."""
    from pipeline.server.wiring import RESULT_MAX_BYTES
    from views.server import state as common

    common.result_store.clear()
    try:
        store = common.result_store()
        for i in range(300):
            store.put(("small", i), [i, float(i)])
        assert len(store) == 300 and store.bytes_held == 300 * deep_size([0, 0.0])
        half = RESULT_MAX_BYTES // 2 + 1
        store.put("big 1", Sized(half))
        store.put("big 2", Sized(half))  # over the bound: the oldest go first, small ones and then big 1
        assert store.peek("big 1") is None and store.peek("big 2") is not None
        assert store.bytes_held <= RESULT_MAX_BYTES
    finally:
        common.result_store.clear()


def test_run_store_computes_once_for_concurrent_callers():
    store, calls, callers = RunStore(), [], 6
    arrived = threading.Condition()
    entered = []

    def slow():  # the computation stays running until every caller has asked for the same key
        calls.append(1)
        with arrived:
            assert arrived.wait_for(lambda: len(entered) == callers, timeout=10), f"{len(entered)} callers came"
        return Sized(1)

    def caller():
        with arrived:
            entered.append(1)
            arrived.notify_all()
        out.append(store.get_or_run("k", slow))

    out = []
    threads = [threading.Thread(target=caller) for _ in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(calls) == 1 and len(out) == callers and len({id(o) for o in out}) == 1


def test_disk_store_survives_a_new_process_view_and_drops_damaged_files(tmp_path):
    disk = DiskStore(tmp_path, max_bytes=10**6)
    disk.put(("q", 1), {"answer": [1, 2, 3]})
    assert DiskStore(tmp_path).get(("q", 1)) == {"answer": [1, 2, 3]}  # another store on the same folder
    path = disk.path(("q", 1))
    path.write_bytes(b"not a pickle")
    assert disk.get(("q", 1)) is None and not path.exists()
    assert not list(tmp_path.glob("*.tmp"))  # nothing half-written left behind


def test_disk_store_evicts_least_recently_used_within_its_budget(tmp_path):
    disk = DiskStore(tmp_path, max_bytes=3 * len(pickle.dumps(b"x" * 1000)) + 100)
    for i in range(3):
        disk.put(i, b"x" * 1000)
        os.utime(disk.path(i), (time.time() - 100 + i, time.time() - 100 + i))  # written one after another
    disk.get(0)  # 0 is used again: now the most recent
    disk.put(3, b"x" * 1000)
    assert disk.get(1) is None and disk.get(0) is not None and disk.get(3) is not None


def test_run_store_reads_through_to_disk(tmp_path):
    first = RunStore(disk=DiskStore(tmp_path))
    first.get_or_run("k", lambda: Sized(5))
    again = RunStore(disk=DiskStore(tmp_path))  # a restart: memory empty, disk kept
    assert again.peek("k") is None and again.peek("k", disk=True).nbytes == 5
    assert again.get_or_run("k", lambda: pytest.fail("must not run again")).nbytes == 5


def test_a_download_after_the_store_dropped_the_run_says_so(monkeypatch):
    """Download buttons hold the run's key; a run dropped since (memory full, disk store off) gives a note,
    not an AttributeError on None."""
    from views.request import runs

    store = RunStore(max_bytes=10, size_of=len)
    monkeypatch.setattr(runs, "run_store", lambda: store)
    store.put(("k",), "the run")
    assert runs.stored_download(("k",), str.upper) == "THE RUN"
    assert runs.stored_download(("gone",), str.upper) == runs.RUN_GONE
