"""What a room of learners needs from the server: the address their laptops can reach, short links
for views whose query string is too long for a QR code, and the presenter's current stage.

Short links and rooms are small JSON files under the cache folder, written atomically (temporary
file, then rename), so every replica behind the balancer reads what another one wrote. Temporaries a
killed writer left are removed when the store starts and after each write (as the disk store of runs).
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import secrets
import socket
import threading
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

from .files import remove_stale_temporaries, write_atomic

PUBLIC_URL_ENV = "TPE_PUBLIC_URL"  # e.g. the LAN address and port, or https://llm-workshop.example.org
CODE = re.compile(r"[a-z0-9]{4,16}")
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}
WILDCARDS = {"", "0.0.0.0", "::", "[::]"}


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
    """Short links (code -> query parameters) and rooms (code -> the presenter's stage and request)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._lock = threading.Lock()
        self._remove_stale_temporaries()

    def _remove_stale_temporaries(self) -> None:
        try:
            remove_stale_temporaries(self.folder)
        except OSError:  # no folder yet (nothing written), or one that cannot be listed
            pass

    def _write(self, name: str, data: dict) -> bool:
        """False when the folder takes no file (read-only, full): links and rooms are then not kept."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_atomic(self.folder / name, lambda f: f.write(json.dumps(data, ensure_ascii=False)), text=True)
        except OSError:
            return False
        self._remove_stale_temporaries()
        return True

    def _read(self, name: str) -> dict | None:
        try:
            data = json.loads((self.folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def put_link(self, query: dict[str, str]) -> str | None:
        """A short code for these query parameters (the same parameters always give the same code), or None
        when it cannot be stored."""
        query = {str(k): str(v) for k, v in query.items()}
        code = hashlib.sha256(json.dumps(sorted(query.items()), ensure_ascii=False).encode()).hexdigest()[:10]
        if self._read(f"link-{code}.json") is None and not self._write(f"link-{code}.json", {"query": query}):
            return None
        return code

    def link(self, code: str) -> dict[str, str] | None:
        if not CODE.fullmatch(code or ""):
            return None
        data = self._read(f"link-{code}.json")
        query = data.get("query") if data else None
        return {str(k): str(v) for k, v in query.items()} if isinstance(query, dict) else None

    def set_stage(self, room: str, stage: int, query: dict[str, str]) -> None:
        """The presenter shows `stage` of the request given by `query` (its parameters)."""
        if not CODE.fullmatch(room):
            raise ValueError("room code")
        with self._lock:
            if self.room(room) != {"stage": stage, "query": query}:
                self._write(f"room-{room}.json", {"stage": int(stage), "query": dict(query)})

    def room(self, room: str) -> dict | None:
        """{"stage": n, "query": {...}} as the presenter last left it, or None."""
        if not CODE.fullmatch(room or ""):
            return None
        data = self._read(f"room-{room}.json")
        if not data or not isinstance(data.get("stage"), int) or not isinstance(data.get("query"), dict):
            return None
        return {"stage": data["stage"], "query": {str(k): str(v) for k, v in data["query"].items()}}


def new_presenter_key() -> str:
    """The presenter's secret (in their own address only): 16 characters, the room's code is derived from it."""
    return secrets.token_hex(8)


def room_of(presenter_key: str) -> str:
    """The room code learners follow: 6 characters, easy to read out, derived from the presenter's key, so
    knowing the code (it is in every learner's link) does not let a learner turn everyone's pages."""
    return hashlib.sha256(f"room:{presenter_key}".encode()).hexdigest()[:6]


@lru_cache(maxsize=1)
def _store(folder: str) -> RoomStore:
    return RoomStore(Path(folder))


def room_store() -> RoomStore:
    from pipeline.model.weights_cache import cache_root

    return _store(str(cache_root() / "room"))
