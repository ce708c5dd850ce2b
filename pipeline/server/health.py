"""Starting a server from a script: a free port for it, and waiting until it answers its health check. The
benches (bench/workshop_load.py, ...) and the browser tests start app servers with these."""
from __future__ import annotations

import socket
import time
import urllib.request


def free_port() -> int:
    """A port of 127.0.0.1 nothing listens on now (the system's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, seconds: float = 120) -> bool:
    """Whether the Streamlit server at url answers its health check (`/_stcore/health`: "ok") within `seconds`."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                return True
        except OSError:
            time.sleep(0.5)  # not up yet: the health check is polled, there is no event to wait for
    return False
