"""What a room of learners needs from the server: the address their laptops can reach, short links
for views whose query string is too long for a QR code, and the presenter's current stage.

Short links and rooms are small JSON files (`room_files`): under the cache folder, written atomically (temporary
file, then rename), so every replica behind the balancer reads what another one wrote; or, with `TPE_STORE=redis://`,
in the room's Redis, so the replicas of every host do. Temporaries a killed writer left are removed when the store
starts and when it lists its folder again (as the disk store of runs).
Only the server makes a room, only when someone starts to present, and only the holder of its presenter key
(128 random bits) moves it. Which files are kept, and for how long, is `room_index`'s policy on disk and
`redis_rooms`' in Redis: a room seen in the last hours is never removed to make space.
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import re
import secrets
import socket
import threading
import time
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

from pipeline.server.room_files import DiskRoomFiles, RoomFiles, StoreUnavailable
from pipeline.server.room_index import LIVE_S
from pipeline.text.counts import plural

PUBLIC_URL_ENV = "TPE_PUBLIC_URL"  # e.g. the LAN address and port, or https://llm-workshop.example.org
CODE = re.compile(r"[a-z0-9]{4,16}")
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}
WILDCARDS = {"", "0.0.0.0", "::", "[::]"}
KEY_BYTES = 16  # the presenter key: 128 random bits, kept by the presenter's session (the file holds its SHA-256)
KEY = re.compile(r"[0-9a-f]{32}")
CODE_LETTERS = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/l/i: a room code is read out loud
CODE_LENGTH = 6
MAX_FILES = 5000  # links and rooms kept on disk (the least recently written go first, never a live room)
MAX_FILES_ENV = "TPE_ROOM_MAX_FILES"  # a smaller bound, for a test that floods the store
MAX_BYTES = 64 * 2**20
MAX_ROOMS = 1000  # live rooms at once (a server serves a few workshops, not a thousand): then a new one is refused
PER_CLIENT = 10  # live rooms one client address may start: a curious class behind one address still fits
TOUCH_S = 60.0  # a room's "seen" time is written at most this often per process (the pages poll every 3 s)
MAX_LINK_BYTES = 2 * 2**20  # one short link's query: the app's longest request (384,000 characters) fits
MEMORY_ENTRIES = 2000  # links and rooms kept in memory when the folder takes no file


def is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def lan_address() -> str | None:
    """This machine's address on its local network (the interface a route to a private address
    uses; no packet is sent), or None when it has none."""
    for probe in ("10.255.255.255", "192.168.255.255"):
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((probe, 1))
                ip = s.getsockname()[0]
            if not ipaddress.ip_address(ip).is_loopback and ip != "0.0.0.0":
                return ip
        except OSError:
            continue
    try:
        ip = socket.gethostbyname(socket.gethostname())
        return None if ipaddress.ip_address(ip).is_loopback else ip
    except (OSError, ValueError):
        return None


def public_base(page_url: str, bind_address: str, configured: str | None = None,
                lan: str | None = None) -> tuple[str, str | None]:
    """(the base URL learners should open, a note for the presenter or None).

    page_url: the presenter's own address; bind_address: the server's `server.address`;
    configured: $TPE_PUBLIC_URL; lan: this machine's LAN address (found when needed)."""
    if configured:
        return configured.rstrip("/"), None
    parts = urlsplit(page_url or "http://localhost:8501")
    base = f"{parts.scheme or 'http'}://{parts.netloc or 'localhost:8501'}"
    host = parts.hostname or "localhost"
    if not is_loopback(host):
        return base, None  # the presenter reached the server by an address others can use too
    port = f":{parts.port}" if parts.port else ""
    bind = (bind_address or "").strip()
    if bind in WILDCARDS:
        lan = lan or lan_address()
        if lan:
            return f"{parts.scheme or 'http'}://{lan}{port}", None
        return base, ("This server listens on every network, but this machine has no network address that others "
                      f"can reach. Set {PUBLIC_URL_ENV} to the address the room uses.")
    if not is_loopback(bind):
        return f"{parts.scheme or 'http'}://{bind}{port}", None
    return base, ("This server only listens on this computer (localhost): no learner's laptop can open this link. "
                  "Start it with `./run.sh app --server.address 0.0.0.0` (or `ROOM_ADDRESS=0.0.0.0 ./run.sh room N`), "
                  f"or set {PUBLIC_URL_ENV} to the address the room reaches.")


class RoomStore:
    """Short links (code -> query parameters) and rooms (code -> the presenter's stage and request).

    A room is made by the server (`create_room`): a code learners follow (in every follow link and QR code) and a
    presenter key of 128 random bits, which only the presenter's browser session holds (the file keeps its
    SHA-256, never the key). Nothing a learner sees derives the key: moving a room (`set_stage`) needs it.

    Files are bounded in count and bytes (the least recently written go first). A folder that takes no file
    (read-only, full), or a room's Redis that does not answer, does not stop a room: it is kept in this process's
    memory (bounded too), and the record says `saved: False`, so both screens can say that other replicas and a
    restart will not see it. `files`: where the files go (`room_files` below picks: the folder, or Redis).
    """

    def __init__(self, folder: Path, max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES,
                 max_rooms: int = MAX_ROOMS, per_client: int = PER_CLIENT, files: RoomFiles | None = None):
        self.folder = Path(folder)
        self.max_rooms, self.per_client = max_rooms, per_client
        self.files = files if files is not None else room_files(self.folder, max_files, max_bytes)
        self._lock = threading.RLock()  # a write reads first, under the same lock
        self._memory: OrderedDict[str, dict] = OrderedDict()  # name -> data the folder did not take
        self._touched: dict[str, float] = {}  # room file -> when this process last wrote its "seen" time
        self._recent: OrderedDict[str, dict] = OrderedDict()  # room file -> what the store last gave (its outages)

    def _write(self, name: str, data: dict) -> bool:
        """Write one file; False when it was not kept (a folder that takes no file, Redis unavailable): the data is
        then kept in memory (bounded), where this process still reads it."""
        with self._lock:
            if not self.files.write(name, data):
                _keep(self._memory, name, data)
                return False
            self._memory.pop(name, None)
            return True

    def _read(self, name: str) -> dict | None:
        """The data of one file, the memory's copy first (it is newer than a file the folder refused to replace).
        A store that does not answer (Redis away) is not a file gone: the last copy this process read is used, so a
        presenter keeps the room and followers keep following until it is back."""
        data = self._memory.get(name)
        if data is not None:
            return data
        try:
            data = self.files.read(name)
        except StoreUnavailable:
            return self._recent.get(name)
        if not name.startswith("room-"):  # a room is small and its outage matters; links are not kept twice
            return data
        with self._lock:
            if data is None:
                self._recent.pop(name, None)
            else:
                _keep(self._recent, name, data)
        return data

    def put_link(self, query: dict[str, str]) -> str | None:
        """A short code for these query parameters (the same parameters always give the same code), or None
        when they are too long to keep."""
        query = {str(k): str(v) for k, v in query.items()}
        text = json.dumps(sorted(query.items()), ensure_ascii=False)
        if len(text.encode("utf-8", "surrogatepass")) > MAX_LINK_BYTES:
            return None
        code = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]
        with self._lock:
            if self._read(f"link-{code}.json") is None:
                self._write(f"link-{code}.json", {"query": query})
        return code

    def link(self, code: str) -> dict[str, str] | None:
        if not CODE.fullmatch(code or ""):
            return None
        data = self._read(f"link-{code}.json")
        query = data.get("query") if data else None
        return {str(k): str(v) for k, v in query.items()} if isinstance(query, dict) else None

    def create_room(self, stage: int, query: dict[str, str], driver: str, client: str = "") -> tuple[str, str, bool]:
        """A new room at `stage` of the request `query`: (code for learners, the presenter's key, saved on disk).
        The code is random too (not derived from the key): knowing it gives the right to follow, nothing more.
        `client` is the address asking (its digest is kept, to count its rooms). Raises RoomRefused when live rooms
        are at their bound, or this client already started `per_client` live rooms: no live room is removed."""
        key = secrets.token_hex(KEY_BYTES)
        who = _digest(f"client:{client}")[:16]
        with self._lock:
            if self.files.live_rooms(who) >= self.per_client:
                raise RoomRefused(f"{plural(self.per_client, 'room')} were started from this address in the last "
                                  f"{LIVE_S // 3600} hours and are still kept for their learners: present in one of "
                                  "them (its presenter link), or try again later.")
            if self.files.live_rooms() >= self.max_rooms:
                raise RoomRefused(f"This server keeps {plural(self.max_rooms, 'room')} in use now, its most: a new one "
                                  "can start once one of them has been left for a few hours.")
            while True:
                code = "".join(secrets.choice(CODE_LETTERS) for _ in range(CODE_LENGTH))
                if self._read(f"room-{code}.json") is None:
                    break
            saved = self._write(f"room-{code}.json", {
                "key_sha256": _digest(key), "stage": int(stage), "query": dict(query), "driver": driver,
                "moved_at": time.time(), "client": who})
        return code, key, saved

    def may_drive(self, code: str, key: str) -> bool:
        """Whether `key` is the presenter key of room `code` (compared in constant time)."""
        data = self._read(f"room-{code}.json") if CODE.fullmatch(code or "") else None
        stored = data.get("key_sha256") if data else None
        return isinstance(stored, str) and isinstance(key, str) and hmac.compare_digest(stored, _digest(key))

    def set_stage(self, code: str, key: str, stage: int, query: dict[str, str], driver: str) -> bool:
        """The presenter shows `stage` of the request given by `query`. Returns whether the room is saved on disk
        (False: kept in this process's memory only). Raises PermissionError when `key` is not the room's."""
        if not CODE.fullmatch(code or ""):
            raise ValueError("room code")
        with self._lock:
            data = self._read(f"room-{code}.json")
            if data is None or not self.may_drive(code, key):
                raise PermissionError(f"this key does not drive room {code}")
            saved = f"room-{code}.json" not in self._memory
            if (data.get("stage"), data.get("query"), data.get("driver")) == (stage, query, driver):
                return saved
            return self._write(f"room-{code}.json", {**data, "stage": int(stage), "query": dict(query),
                                                    "driver": driver, "moved_at": time.time()})

    def room(self, code: str, seen: bool = False) -> dict | None:
        """{"stage", "query", "driver", "moved_at", "saved"} as the presenter last left it, or None.
        `driver` names the presenter's browser session that moved it last; `saved` is False for a room this
        process keeps in memory only (its folder took no file). `seen`: a page of the room asks (a presenter's or a
        follower's poll), which keeps the room live; its file's time is touched at most once every TOUCH_S."""
        if not CODE.fullmatch(code or ""):
            return None
        name = f"room-{code}.json"
        data = self._read(name)
        if not data or not isinstance(data.get("stage"), int) or not isinstance(data.get("query"), dict):
            return None
        if seen and name not in self._memory:
            with self._lock:
                now = time.monotonic()
                if now - self._touched.get(name, float("-inf")) >= TOUCH_S:
                    self._touched[name] = now
                    if len(self._touched) > MEMORY_ENTRIES:  # forget the oldest touches (rooms long gone)
                        for old in sorted(self._touched, key=self._touched.get)[:len(self._touched) // 2]:
                            del self._touched[old]
                    self.files.touch(name, str(data.get("client", "")))
        return {"stage": data["stage"], "query": {str(k): str(v) for k, v in data["query"].items()},
                "driver": str(data.get("driver", "")), "moved_at": float(data.get("moved_at") or 0),
                "saved": name not in self._memory}


def _keep(kept: OrderedDict, name: str, data: dict) -> None:
    """`data` kept in this process's memory under `name`, the newest last; at most MEMORY_ENTRIES (oldest out)."""
    kept[name] = data
    kept.move_to_end(name)
    while len(kept) > MEMORY_ENTRIES:
        kept.popitem(last=False)


def room_files(folder: Path, max_files: int, max_bytes: int) -> RoomFiles:
    """The room's files: in Redis when TPE_STORE names it (shared by every host's replicas), else in `folder`."""
    from pipeline.server.store.shared import store_url

    url = store_url()
    if url is None:
        return DiskRoomFiles(folder, max_files, max_bytes)
    from pipeline.server.store.redis_rooms import RedisRoomFiles

    return RedisRoomFiles(url, max_links=max_files)


class RoomRefused(Exception):
    """No new room now (the message says why, for the presenter's screen)."""


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def new_driver_id() -> str:
    """Names one presenter's browser session in its room's record, so that it can tell its own moves from another's."""
    return secrets.token_hex(8)


@lru_cache(maxsize=1)
def _store(folder: str) -> RoomStore:
    bound = os.environ.get(MAX_FILES_ENV, "")
    return RoomStore(Path(folder), max_files=int(bound) if bound.isdigit() and int(bound) > 0 else MAX_FILES)


def room_store() -> RoomStore:
    from pipeline.model.weights_cache import cache_root

    return _store(str(cache_root() / "room"))
