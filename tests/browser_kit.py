"""What the browser tests share: Debian's Chromium, an app server started like `./run.sh` does, and
waiting until a page has finished running."""
from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "artifacts" / "browser"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, seconds: float = 120) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                return True
        except OSError:
            time.sleep(0.5)
    return False


@contextlib.contextmanager
def app_server(log_name: str, host: str = "localhost"):
    """`streamlit run app.py` on a free port with the project's .streamlit/config.toml; yields its URL."""
    port = free_port()
    (ROOT / "artifacts").mkdir(exist_ok=True)
    with open(ROOT / "artifacts" / log_name, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)],
                                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://{host}:{port}"
        try:
            if not wait_healthy(url):
                pytest.fail("the Streamlit server did not start")
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def settle(page, timeout: float = 400) -> None:
    """Wait until the script has finished (no status widget, no queue notice) a few polls in a row."""
    page.wait_for_timeout(800)
    deadline, quiet = time.time() + timeout, 0
    while time.time() < deadline and quiet < 3:
        busy = page.locator('[data-testid="stStatusWidget"]').count() > 0 or "in line" in page.inner_text("body")
        quiet = 0 if busy else quiet + 1
        page.wait_for_timeout(400)
    page.wait_for_timeout(600)
