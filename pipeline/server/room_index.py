"""The room store's view of its folder, kept in memory so that a write does not list and stat the whole folder.

The policy, in a few lines:
- Every link and room file has an entry: (mtime, bytes, kind, client). The index is built once from the folder when
  the store starts, then follows this process's own writes, touches and removals.
- A room's mtime is when it was last seen: written by its presenter, or touched (at most once a minute per process)
  by the polls of its presenter's and followers' pages. A room seen within LIVE_S is live.
- Over the bound (files or bytes), the least recently written links and rooms that are not live go first. A live
  room is never removed; a new room is refused instead when live rooms reach their own bound (`max_rooms`), or
  when the client asking already started `per_client` of them.
- Replicas share the folder and each keeps its own index: before removing a file the index stats it (another
  replica may have written or touched it since: then it is kept), and at most once every RESCAN_S the index is
  rebuilt from the folder (files other replicas wrote or removed). Between two rescans a replica may count a few
  files short: the folder can pass its bound by what the other replicas wrote in that minute.

Example: max_files=3, files [link a (1 h old), room b (live), link c], a new link d: `a` is removed; then a new link
e: `c` is removed (b is live and stays).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.files import remove_stale_temporaries

LIVE_S = 3 * 3600  # a room seen (moved, or polled by a page) within 3 hours is never removed: a lunch break fits
RESCAN_S = 60.0  # the folder is listed again at most this often (files other replicas wrote or removed)
KINDS = ("link-", "room-")


@dataclass
class Entry:
    mtime: float  # last written or, for a room, last seen
    size: int
    client: str = ""  # a room: the digest of the address that started it ('' for a link)


def listed(name: str) -> bool:
    return name.endswith(".json") and name.startswith(KINDS)


class FolderIndex:
    """name -> Entry for the folder's links and rooms. Not thread-safe alone: the store holds its lock."""

    def __init__(self, folder: Path, clock=time.time):
        self.folder, self.clock = folder, clock
        self.entries: dict[str, Entry] = {}
        self.scans = 0  # how many times the whole folder was listed (a test counts them)
        self._scanned_at = float("-inf")
        self.rescan()

    def rescan(self) -> None:
        """List the folder once: new files (a room's client read from its JSON), changed mtimes, removed files.
        Also removes temporaries that dead writers left."""
        self.scans += 1
        self._scanned_at = self.clock()
        try:
            remove_stale_temporaries(self.folder)
            names = [p.name for p in self.folder.iterdir() if listed(p.name)]
        except OSError:  # no folder yet (nothing written), or one that cannot be listed
            return
        fresh: dict[str, Entry] = {}
        for name in names:
            try:
                s = (self.folder / name).stat()
            except OSError:
                continue
            old = self.entries.get(name)
            client = old.client if old else (_client_of(self.folder / name) if name.startswith("room-") else "")
            fresh[name] = Entry(s.st_mtime, s.st_size, client)
        self.entries = fresh

    def rescan_if_due(self) -> None:
        if self.clock() - self._scanned_at >= RESCAN_S:
            self.rescan()

    def wrote(self, name: str, client: str = "") -> None:
        """This process wrote `name` (its size and mtime from one stat)."""
        try:
            s = (self.folder / name).stat()
        except OSError:
            self.entries.pop(name, None)
            return
        old = self.entries.get(name)
        self.entries[name] = Entry(s.st_mtime, s.st_size, client or (old.client if old else ""))

    def found(self, name: str, client: str = "") -> None:
        """A file read that the index did not know (another replica wrote it): entered, without a listing; client:
        the room's client digest as the caller just read it (no second read of the file)."""
        if name not in self.entries:
            self.wrote(name, client if name.startswith("room-") else "")

    def touch(self, name: str) -> bool:
        """A room seen now: its mtime set to now. False when the file is gone."""
        try:
            os.utime(self.folder / name)
        except OSError:
            self.entries.pop(name, None)
            return False
        self.wrote(name)
        return True

    def live(self, name: str, entry: Entry, now: float) -> bool:
        return name.startswith("room-") and now - entry.mtime < LIVE_S

    def live_rooms(self, client: str | None = None) -> int:
        now = self.clock()
        return sum(1 for name, e in self.entries.items()
                   if self.live(name, e, now) and (client is None or e.client == client))

    def bound(self, max_files: int, max_bytes: int) -> list[str]:
        """Remove the least recently written links and rooms that are not live until the folder is within
        max_files and max_bytes (live rooms are never removed). Returns the names removed."""
        count, size = len(self.entries), sum(e.size for e in self.entries.values())
        if count <= max_files and size <= max_bytes:
            return []
        now, removed = self.clock(), []
        for name in sorted(self.entries, key=lambda n: self.entries[n].mtime):
            if count <= max_files and size <= max_bytes:
                break
            entry = self.entries[name]
            if self.live(name, entry, now):
                continue
            try:  # another replica may have written or touched it since this index last looked
                s = (self.folder / name).stat()
            except FileNotFoundError:
                del self.entries[name]
                count, size = count - 1, size - entry.size
                continue
            except OSError:
                continue
            if s.st_mtime > entry.mtime:
                self.entries[name] = Entry(s.st_mtime, s.st_size, entry.client)
                continue
            try:
                (self.folder / name).unlink()
            except FileNotFoundError:
                pass
            except OSError:
                continue
            if name.startswith("room-"):  # its polls go with it (pipeline/server/polls/store.py)
                shutil.rmtree(self.folder / f"polls-{name[len('room-'):-len('.json')]}", ignore_errors=True)
            del self.entries[name]
            removed.append(name)
            count, size = count - 1, size - entry.size
        return removed


def _client_of(path: Path) -> str:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    client = data.get("client") if isinstance(data, dict) else None
    return client if isinstance(client, str) else ""
