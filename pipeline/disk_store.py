"""Finished runs kept on disk, so identical requests cost nothing across sessions and restarts.

One file per run under the cache folder, named by a hash of its key. Written to a temporary file
in the same folder, flushed to disk, then renamed into place: a crash mid-write leaves no half
file where a reader would find it, and several processes (replicas) can share the folder — the
last of two identical writes wins, and both wrote the same run. Bounded in bytes: the least
recently used files go first. Files are this program's own pickles; nothing else is read.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import threading
from pathlib import Path
from typing import Hashable

FORMAT = 3  # bump when the stored classes change shape; older files are then simply not found
SUFFIX = ".run.pkl"


class DiskStore:
    def __init__(self, folder: Path, max_bytes: int = 4 * 2**30):
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def path(self, key: Hashable) -> Path:
        digest = hashlib.sha256(f"{FORMAT}|{key!r}".encode("utf-8", "surrogatepass")).hexdigest()[:40]
        return self.folder / f"{digest}{SUFFIX}"

    def get(self, key: Hashable):
        """The stored object, or None (missing, or unreadable: then the file is removed)."""
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                obj = pickle.load(f)
        except FileNotFoundError:
            return None
        except Exception:  # a file from an older version or a damaged one: drop it, run again
            path.unlink(missing_ok=True)
            return None
        try:
            os.utime(path)  # recently used
        except OSError:
            pass
        return obj

    def put(self, key: Hashable, obj) -> None:
        path = self.path(key)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            with open(tmp, "wb") as f:
                pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)  # a full or read-only disk: the run is still served from memory
            return
        self._evict()

    def _evict(self) -> None:
        with self._lock:
            files = []
            for p in self.folder.glob(f"*{SUFFIX}"):
                try:
                    st = p.stat()
                    files.append((st.st_mtime, st.st_size, p))
                except FileNotFoundError:
                    continue
            total = sum(size for _, size, _ in files)
            for _, size, p in sorted(files):
                if total <= self.max_bytes:
                    break
                p.unlink(missing_ok=True)
                total -= size

    @property
    def bytes_held(self) -> int:
        return sum(p.stat().st_size for p in self.folder.glob(f"*{SUFFIX}") if p.exists())
