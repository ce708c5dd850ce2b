"""A real redis-server on a free port of 127.0.0.1, with a password, as `./run.sh room-store` starts it (Debian's
redis-server; tests that need it skip where it is not installed), and the room stores that share one: fixture
`replica` makes "another replica" of a room's store on each call, on one folder (disk) or, with its own folder,
sharing only that Redis (redis): a test of rooms and polls runs on both."""
import shutil
import socket
import subprocess
import time
from itertools import count

import pytest

from pipeline.server.health import free_port

REDIS = shutil.which("redis-server")
PASSWORD = "test-room-secret"
needs_redis = pytest.mark.skipif(REDIS is None,
                                 reason="Debian's redis-server is not installed (./run.sh room-store installs it)")


def answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


class Server:
    def __init__(self, tmp_path, maxmemory: str = "64mb"):
        self.port, self.dir, self.maxmemory, self.proc = free_port(), tmp_path, maxmemory, None
        self.url = f"redis://:{PASSWORD}@127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen([REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--protected-mode", "yes",
                                      "--requirepass", PASSWORD, "--maxmemory", self.maxmemory,
                                      "--maxmemory-policy", "allkeys-lru", "--save", "", "--appendonly", "no",
                                      "--dir", str(self.dir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not answers_ping(self.port):
            assert self.proc.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)  # waiting for the server's port, bounded

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)

    def kill(self) -> None:
        """kill -9: no snapshot, no goodbye (this server keeps nothing on disk: it restarts empty)."""
        self.proc.kill()
        self.proc.wait(timeout=20)

    def client(self):
        import redis

        return redis.Redis.from_url(self.url)


@pytest.fixture
def redis_server(tmp_path):
    if REDIS is None:
        pytest.skip("Debian's redis-server is not installed (./run.sh room-store installs it)")
    s = Server(tmp_path)
    s.start()
    yield s
    s.stop()


class Replicas:
    """replicas(**bounds) -> a new RoomStore: another replica of one room store. On disk: on the same folder; on
    Redis: on a folder of its own (another host), sharing only a real redis-server."""

    def __init__(self, folder, server: Server | None):
        self.folder, self.server, self.hosts = folder, server, count()

    def __call__(self, **bounds):
        from pipeline.server.room import MAX_FILES, RoomStore
        from pipeline.server.store.redis_rooms import RedisRoomFiles

        if self.server is None:
            return RoomStore(self.folder, **bounds)
        files = RedisRoomFiles(self.server.url, max_links=bounds.get("max_files", MAX_FILES))
        return RoomStore(self.folder / f"host-{next(self.hosts)}", files=files, **bounds)

    def damage(self, name: str) -> None:
        """A top-level file (`room-CODE.json`) that is not JSON, as a crash or another program could leave it."""
        if self.server is None:
            (self.folder / name).write_text("{not json")
        else:
            from pipeline.server.store.redis_rooms import PREFIX

            self.server.client().set(PREFIX + "f:" + name, "{not json")

    def everything(self) -> list[str]:
        """Every name and every value the store holds (the folder's files, or Redis's keys, fields and members)."""
        if self.server is None:
            return [t for p in self.folder.rglob("*") if p.is_file() for t in (p.name, p.read_text(errors="replace"))]
        client, found = self.server.client(), []
        for key in client.scan_iter():
            found.append(key.decode())
            kind = client.type(key).decode()
            values = {"string": lambda: [client.get(key)], "hash": lambda: [x for kv in client.hgetall(key).items()
                                                                             for x in kv],
                      "set": lambda: list(client.smembers(key)), "zset": lambda: client.zrange(key, 0, -1)}[kind]()
            found += [v.decode(errors="replace") for v in values]
        return found


@pytest.fixture(params=["disk", "redis"])
def replicas(request, tmp_path) -> Replicas:
    """Makes the replicas of one room store: on disk, and on a real Redis (Replicas)."""
    return Replicas(tmp_path, request.getfixturevalue("redis_server") if request.param == "redis" else None)
