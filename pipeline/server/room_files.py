"""Where a room's small JSON files live: the local cache folder (the default), or the room's Redis, so that every
replica on every host reads the room, its short links and its polls that another one wrote.

Names are relative paths: `link-CODE.json` and `room-CODE.json` at the top, a room's polls under `polls-CODE/`
(`polls-CODE/poll-ID.json`, `polls-CODE/answers-ID/DIGEST.json`: pipeline/server/polls/store.py). Both backends give
the same answers to the same calls: `read` (None for a missing or unreadable file; StoreUnavailable when Redis does
not answer, so that a room is never taken for gone while its store is away), `write` (False
when the file was not kept: a folder that takes no file, Redis unavailable), `remove`, `names` (the files directly in
a folder), `folders` (the top level's folders), and for rooms `touch` (seen now) and `live_rooms` (seen within LIVE_S,
all or one client's). Which links and rooms are kept, and for how long: `room_index` on disk, Redis's keys' lifetimes
and a bound on links in `pipeline/server/store/redis_rooms.py`; a live room is never removed by either.

`TPE_STORE=redis://...` (the same variable as the runs' store: pipeline/server/store/shared.py) picks Redis
(`room.room_files`).
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Protocol

from pipeline.core.files import write_atomic
from pipeline.server.room_index import FolderIndex


class StoreUnavailable(OSError):
    """The room's store did not answer (Redis down, or skipped during its backoff): not the same as a missing file,
    which `read` says with None. A folder never raises it."""


class RoomFiles(Protocol):
    where: str  # what a page may name: the folder, or Redis's address (never its password)
    problem: str | None  # why the store does not answer now, in words (None: it does; a folder: always None)

    def read(self, name: str) -> dict | None: ...

    def write(self, name: str, data: dict) -> bool: ...

    def remove(self, name: str) -> None: ...

    def names(self, folder: str) -> list[str]: ...

    def folders(self) -> list[str]: ...

    def touch(self, name: str, client: str) -> None: ...

    def live_rooms(self, client: str | None = None) -> int: ...


def top_level(name: str) -> bool:
    """'room-abc123.json' is; 'polls-abc123/current.json' is not (a file of a folder: in Redis, a field of its hash)."""
    return "/" not in name


class DiskRoomFiles:
    """The files in `folder`, each written whole (write_atomic). Links and rooms at its top are kept in an index
    (room_index.FolderIndex: bounded by max_files and max_bytes, live rooms never removed; a room's `polls-CODE/`
    goes with it)."""

    problem = None  # a folder answers (a write it refuses is said by the room's `saved`)

    def __init__(self, folder: Path, max_files: int, max_bytes: int):
        self.folder, self.where = Path(folder), str(folder)
        self.max_files, self.max_bytes = max_files, max_bytes
        self.index = FolderIndex(self.folder)  # lists the folder once (and its dead writers' temporaries)
        self._lock = threading.RLock()  # the index is not thread-safe alone

    def read(self, name: str) -> dict | None:
        try:
            data = json.loads((self.folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        if top_level(name):
            with self._lock:
                self.index.found(name, str(data.get("client", "")))  # another replica wrote it: counted, no listing
        return data

    def write(self, name: str, data: dict) -> bool:
        path = self.folder / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, lambda f: f.write(json.dumps(data, ensure_ascii=False)), text=True)
        except OSError:
            return False
        if top_level(name):
            with self._lock:
                self.index.rescan_if_due()
                self.index.wrote(name, str(data.get("client", "")))
                self.index.bound(self.max_files, self.max_bytes)
        return True

    def remove(self, name: str) -> None:
        try:
            (self.folder / name).unlink(missing_ok=True)
        except OSError:
            pass

    def names(self, folder: str) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.folder / folder) if n.endswith(".json"))
        except OSError:
            return []

    def folders(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.folder) if (self.folder / n).is_dir())
        except OSError:
            return []

    def touch(self, name: str, client: str) -> None:
        with self._lock:
            self.index.touch(name)

    def live_rooms(self, client: str | None = None) -> int:
        with self._lock:
            self.index.rescan_if_due()
            return self.index.live_rooms(client)
