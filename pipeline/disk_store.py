"""Finished runs kept on disk, so identical requests cost nothing across sessions and restarts.

One file per run under the cache folder, named by a hash of its key. Written to a temporary file
in the same folder, flushed to disk, then renamed into place: a crash mid-write leaves no half
file where a reader would find it, and several processes (replicas) can share the folder — the
last of two identical writes wins, and both wrote the same run. Bounded in bytes: the least
recently used files go first, and the bound counts every file in the folder: temporaries a killed
writer left are counted, and removed at start and before each eviction once their writer is gone.
A folder that cannot be written (read-only, full) turns the store off: `problem` says why, runs are
served from memory, and runs already there are still read. Files are this program's own pickles;
nothing else is read.

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
import os
import pickle
import stat
import threading
from pathlib import Path
from typing import Callable, Hashable

from .files import remove_stale_temporaries, temporary_path, write_atomic

FORMAT = 8  # bump when the stored classes change shape; older files are then simply not found
SUFFIX = ".run.pkl"


class DiskStore:
    def __init__(self, folder: Path, max_bytes: int = 4 * 2**30,
                 shares: Callable[[Hashable], bool] = lambda key: True):
        """shares(key): whether `key`'s value is kept here at all (others: get finds nothing, put writes nothing)."""
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self.shares = shares
        self._lock = threading.Lock()
        self.problem: str | None = None  # why runs are not being saved, in words (None: they are)
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
        """The stored object, or None (missing, or unreadable: then the file is removed)."""
        if not self.shares(key):
            return None
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                obj = pickle.load(f)
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
        if not self.shares(key):
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)  # not there at start (read-only then): try again
            write_atomic(self.path(key), lambda f: pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError as e:  # a full or read-only disk: the run is still served from memory
            self.problem = f"the last run could not be written ({e.strerror})"
            return
        self.problem = None
        try:
            self._evict()
        except OSError:  # the folder went away meanwhile: nothing to bound
            pass

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
