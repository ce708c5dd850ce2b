"""Finished runs kept on disk, so identical requests cost nothing across sessions and restarts.

One file per run under the cache folder, named by a hash of its key. Written to a temporary file
in the same folder, flushed to disk, then renamed into place: a crash mid-write leaves no half
file where a reader would find it, and several processes (replicas) can share the folder — the
last of two identical writes wins, and both wrote the same run. Bounded in bytes: the least
recently used files go first, and the bound counts every file in the folder: temporaries a killed
writer left are counted, and removed at start and before each eviction once their writer is gone.
A folder that cannot be written (read-only, full) does not lose what was finished meanwhile: `problem`
says why, runs are served from memory, runs already there are still read, and each run that could not be
written is kept (a reference to the object, PENDING_MAX_BYTES at most, the oldest dropped first) until
the folder takes it: the next write that succeeds hands them to a background thread, which also tries
again on its own (1 s, doubling to 60 s). Only whole files appear (write_atomic); a write that fails half
way leaves nothing. Files are this program's own pickles; nothing else is read.

Why not `diskcache.Cache` (5.6.3, tried here): it is multi-process safe (SQLite) and takes
`size_limit` with an LRU policy, but it would not keep this store's guarantees with less code. Its
bound is its own bookkeeping, not the folder: a file a killed writer left is not counted and never
removed (only a full `check(fix=True)` finds it), and culling works from the SQLite file's size, so
ten 100 kB values under a 300 kB limit left one. A damaged value file raises UnpicklingError on every
`get` and stays (or, for bytes, comes back as the damaged bytes) where ours drops it and runs again;
a folder it cannot create raises at construction, so the read-only fallback and `problem` would
still be ours; and FORMAT would still have to go into every key. The wrapper around it would be
about as long as this module, with a SQLite database beside the runs to look after.
"""
from __future__ import annotations

import hashlib
import logging
import os
import pickle
import stat
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Hashable

from pipeline.core.files import remove_stale_temporaries, temporary_path, write_atomic
from pipeline.server.store import moved_classes
from pipeline.text.counts import plural

FORMAT = 9  # bump when the stored classes change shape or stored values were wrong; older files are then simply
# not found. 9: long-prompt captures stored in float16 held inf where Gemma 3's residual stream passes 65,504.
SUFFIX = ".run.pkl"
PENDING_MAX_BYTES = 256 * 2**20  # runs that wait in memory for the folder to take them again
RETRY_S = (1.0, 60.0)  # first wait before trying the waiting runs again, longest wait
log = logging.getLogger("pipeline.server.store.disk")


class DiskStore:
    def __init__(self, folder: Path, max_bytes: int = 4 * 2**30,
                 shares: Callable[[Hashable], bool] = lambda key: True,
                 pending_max_bytes: int = PENDING_MAX_BYTES, retry_s: tuple[float, float] = RETRY_S):
        """shares(key): whether `key`'s value is kept here at all (others: get finds nothing, put writes nothing)."""
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self.shares = shares
        self.pending_max_bytes, self.retry_s = pending_max_bytes, retry_s
        self._lock = threading.Lock()
        self.problem: str | None = None  # why runs are not being saved, in words (None: they are)
        # runs that could not be written, oldest first: path -> (the object, its size in memory)
        self._pending: OrderedDict[Path, tuple[object, int]] = OrderedDict()
        self._pending_bytes = 0
        self._pending_lock = threading.Lock()
        self._emptied = threading.Condition(self._pending_lock)  # notified when nothing waits any more
        self._try_now = threading.Event()  # a write succeeded: the retry thread writes the waiting runs now
        self._retrying: threading.Thread | None = None
        self._closed = False  # close(): the retry thread stops and writes nothing more
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            remove_stale_temporaries(self.folder)
            probe = temporary_path(self.folder / "probe")
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            self.problem = f"the folder cannot be written ({e.strerror})"

    def path(self, key: Hashable) -> Path:
        digest = hashlib.sha256(f"{FORMAT}|{key!r}".encode("utf-8", "surrogatepass")).hexdigest()[:40]
        return self.folder / f"{digest}{SUFFIX}"

    def get(self, key: Hashable):
        """The stored object, or None (missing, or unreadable: then the file is removed). A run waiting to be
        written is found too."""
        if not self.shares(key):
            return None
        path = self.path(key)
        with self._pending_lock:
            waiting = self._pending.get(path)
        if waiting is not None:
            return waiting[0]
        try:
            with open(path, "rb") as f:
                obj = moved_classes.load(f)
        except FileNotFoundError:
            return None
        except Exception:  # a file from an older version or a damaged one: drop it, run again
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass
            return None
        try:
            os.utime(path)  # recently used
        except OSError:
            pass
        return obj

    def put(self, key: Hashable, obj) -> None:
        """Write `obj` under `key`; never raises. A folder that refuses it (full, read-only): it waits in memory
        and is written once the folder takes files again."""
        if not self.shares(key):
            return
        path = self.path(key)
        try:
            self._write(path, obj)
        except OSError as e:  # a full or read-only disk: the run is still served from memory, and kept
            self._keep_for_later(path, obj, e)
            return
        with self._pending_lock:
            self._drop_pending(path)  # an older wait for the same run: written now (and no problem if none waits)
            waiting = bool(self._pending)
        if waiting:
            self._try_now.set()  # the folder takes files again: the retry thread writes the others now
        self._bound()

    def _write(self, path: Path, obj) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)  # not there at start (read-only then): try again
        write_atomic(path, lambda f: pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL))

    def _bound(self) -> None:
        try:
            self._evict()
        except OSError:  # the folder went away meanwhile: nothing to bound
            pass

    # -- runs waiting for the folder --------------------------------------------------------------------
    @property
    def waiting(self) -> int:
        """Runs that could not be written yet (kept in memory until the folder takes them)."""
        with self._pending_lock:
            return len(self._pending)

    def wait_written(self, timeout: float | None = None) -> bool:
        """Block until no run waits to be written (True), or `timeout` seconds have passed (False)."""
        with self._emptied:
            return self._emptied.wait_for(lambda: not self._pending, timeout)

    def _say_waiting(self, error: OSError) -> None:
        """Pending lock held."""
        n = len(self._pending)
        waits = "waits in memory and is" if n == 1 else "wait in memory and are"
        self.problem = (f"the last run could not be written ({error.strerror}); {plural(n, 'run')} {waits} written "
                        "once the folder takes files again")

    def _keep_for_later(self, path: Path, obj, error: OSError) -> None:
        from pipeline.server.store.memory import deep_size

        size = deep_size(obj)
        with self._pending_lock:
            self._drop_pending(path)
            self._pending[path] = (obj, size)
            self._pending_bytes += size
            while self._pending_bytes > self.pending_max_bytes and len(self._pending) > 1:
                dropped, (_, dropped_size) = self._pending.popitem(last=False)
                self._pending_bytes -= dropped_size
                log.warning("a run waiting for %s was dropped (%d MB wait already): %s", self.folder,
                            self._pending_bytes // 2**20, dropped.name)
            self._say_waiting(error)
            if self._retrying is None:
                self._retrying = threading.Thread(target=self._retry_until_written, daemon=True,
                                                  name="disk-store-retry")
                self._retrying.start()

    def _drop_pending(self, path: Path) -> None:
        """Pending lock held."""
        old = self._pending.pop(path, None)
        if old is not None:
            self._pending_bytes -= old[1]
        if not self._pending:
            self.problem = None  # before anyone waiting for it hears that nothing waits
            self._emptied.notify_all()

    def _write_pending(self) -> bool:
        """The retry thread: write the waiting runs, oldest first, until one fails. Whether none waits any more
        (then the thread ends)."""
        while True:
            if self._closed:  # close(): nothing more is written
                return False
            with self._pending_lock:
                if not self._pending:
                    self._retrying = None  # a run kept from now on starts a new thread
                    return True
                path, (obj, _) = next(iter(self._pending.items()))
            try:
                self._write(path, obj)
            except OSError as e:
                with self._pending_lock:
                    self._say_waiting(e)
                return False
            with self._pending_lock:
                if self._pending.get(path, (None,))[0] is obj:  # not replaced by a newer put meanwhile
                    self._drop_pending(path)
            self._bound()

    def _retry_until_written(self) -> None:
        """Background: write the waiting runs as soon as a write succeeds (put sets _try_now), else every
        retry_s (doubling); ends when none waits."""
        wait = self.retry_s[0]
        while True:
            self._try_now.wait(wait)  # the backoff, or a signal that the folder takes files again
            if self._closed:
                return
            woken = self._try_now.is_set()
            self._try_now.clear()
            if self._write_pending():
                log.warning("the runs that waited for %s are written", self.folder)
                return
            if self._closed:
                return
            wait = self.retry_s[0] if woken else min(wait * 2, self.retry_s[1])

    def close(self, timeout_s: float = 10) -> None:
        """This store is no longer used (a server's stores replaced): its retry thread ends without writing the runs
        still waiting, and says nothing more. Returns once that thread has ended (at most `timeout_s`): it may be
        listing the folder after its last write, which holds the folder open (a disk could not be unmounted)."""
        self._closed = True
        self._try_now.set()
        retrying = self._retrying
        if retrying is not None and retrying is not threading.current_thread():
            retrying.join(timeout_s)

    def attach_memory(self, held) -> None:
        """Nothing to do: a folder does not forget the files it holds (see RedisStore.attach_memory)."""

    def kept_local(self, key: Hashable) -> str | None:
        """Never: every run this process can write is written (see `problem` for a folder that cannot be)."""
        return None

    def _files(self) -> list[tuple[float, int, Path]]:
        """(mtime, size, path) of every file in the folder, runs and anything else."""
        files = []
        for p in self.folder.iterdir():
            try:
                st = p.stat()
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                files.append((st.st_mtime, st.st_size, p))
        return files

    def _evict(self) -> None:
        with self._lock:
            remove_stale_temporaries(self.folder)
            files = self._files()
            total = sum(size for _, size, _ in files)
            for _, size, p in sorted(f for f in files if f[2].name.endswith(SUFFIX)):
                if total <= self.max_bytes:
                    break
                p.unlink(missing_ok=True)
                total -= size

    @property
    def bytes_held(self) -> int:
        """Bytes of every file in the folder (what the bound counts)."""
        try:
            return sum(size for _, size, _ in self._files())
        except OSError:  # the folder is gone or unreadable
            return 0
