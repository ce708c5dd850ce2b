"""Runs finished while the store's folder cannot take them (a full disk) are kept in memory and written once
it can: on a real full tmpfs, and with a write that fails half way (ENOSPC after some bytes reached the
temporary). Nothing is ever half-written: a reader finds the whole run or nothing."""
import errno
import os
import pickle

from kit.disk import fill, tiny_tmpfs

from pipeline.core.files import write_atomic
from pipeline.server.store import disk as disk_store
from pipeline.server.store.disk import SUFFIX, DiskStore


def test_a_run_finished_on_a_full_disk_reaches_it_once_there_is_room(tmp_path):
    run = os.urandom(300_000)  # incompressible, larger than what is left
    with tiny_tmpfs(tmp_path / "disk", size="1m") as disk:
        store = DiskStore(disk / "runs", retry_s=(0.05, 0.2))
        fill(disk)
        store.put("answer", run)  # never raises
        assert store.waiting == 1 and "No space left on device" in store.problem
        assert "1 run waits in memory and is written" in store.problem  # not "1 run wait ... are written"
        assert os.listdir(disk / "runs") == []  # no half file, no temporary
        assert store.get("answer") == run  # still served while it waits
        assert DiskStore(disk / "runs").get("answer") is None  # not on disk yet (another process would not find it)
        (disk / "filler").unlink()  # room again: the retry thread writes it on its own
        assert store.wait_written(timeout=60)
        assert store.waiting == 0 and store.problem is None
        assert [p.endswith(SUFFIX) for p in os.listdir(disk / "runs")] == [True]
        assert DiskStore(disk / "runs").get("answer") == run  # what a restarted server or a replica reads
        store.close()  # its retry thread may still be listing the folder after its write: the disk is then busy


def full_disk_after(n_bytes: int):
    """write_atomic as on a disk that fills after `n_bytes` of a file: the bytes reach the temporary, then ENOSPC."""

    def write(path, fill_file, text=False):
        def half_then_full(f):
            f.write(b"\x80" * n_bytes)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        write_atomic(path, half_then_full, text)

    return write


def test_a_write_that_fails_half_way_leaves_nothing_and_the_next_write_that_succeeds_brings_the_waiting_runs(
        tmp_path, monkeypatch):
    store = DiskStore(tmp_path, retry_s=(3600, 3600), pending_max_bytes=10**6)  # no timer: the next write does it
    monkeypatch.setattr(disk_store, "write_atomic", full_disk_after(50_000))
    first, second = {"ids": list(range(1000))}, b"s" * 100_000
    store.put("first", first)
    store.put("second", second)
    assert store.waiting == 2 and "2 runs wait in memory and are written" in store.problem
    assert os.listdir(tmp_path) == []  # the temporaries went with their failed writes: nothing half-written
    monkeypatch.setattr(disk_store, "write_atomic", write_atomic)  # room again
    store.put("third", b"t")  # succeeds, and hands the waiting ones to the retry thread
    assert store.wait_written(timeout=60) and store.problem is None
    again = DiskStore(tmp_path)
    assert again.get("first") == first and again.get("second") == second and again.get("third") == b"t"
    files = os.listdir(tmp_path)
    assert len(files) == 3 and all(p.endswith(SUFFIX) for p in files)  # three whole runs, no temporary
    assert all(pickle.loads((tmp_path / p).read_bytes()) in (first, second, b"t") for p in files)


def test_what_waits_is_bounded_oldest_first_out(tmp_path, monkeypatch):
    monkeypatch.setattr(disk_store, "write_atomic", full_disk_after(0))
    store = DiskStore(tmp_path, retry_s=(3600, 3600), pending_max_bytes=250_000)
    for n in range(3):
        store.put(n, b"r" * 100_000)
    assert store.waiting == 2 and store.get(0) is None and store.get(2) == b"r" * 100_000
    monkeypatch.setattr(disk_store, "write_atomic", write_atomic)
    store.put("room", b"x")
    assert store.wait_written(timeout=60)
    assert DiskStore(tmp_path).get(1) == b"r" * 100_000 and DiskStore(tmp_path).get(0) is None


def test_a_closed_store_writes_nothing_more_and_its_retry_thread_ends(tmp_path):
    run = os.urandom(300_000)
    with tiny_tmpfs(tmp_path / "disk", size="1m") as disk:
        store = DiskStore(disk / "runs", retry_s=(0.05, 0.2))
        fill(disk)
        store.put("answer", run)
        assert store.waiting == 1
        retrying = store._retrying
        store.close()
        assert retrying is not None and not retrying.is_alive()  # close() returned once its thread had ended
        (disk / "filler").unlink()  # room again: nobody writes the run now
        assert os.listdir(disk / "runs") == [] and DiskStore(disk / "runs").get("answer") is None
