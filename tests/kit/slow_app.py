"""The app with a slow page, for browser tests that act while a run is still going (kill the server, reload).

The server runs app.py itself, unchanged, through a small wrapper script that makes views.chrome.frame.page_header sleep
after it has drawn the page's title: the sidebar and the title are in the browser, the rest of the run (the page,
the sidebar's link, the end-of-run mark) waits. On every run, or, given `mark`, only on runs whose question holds
`mark`, so that other runs of the same server are as usual.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.server.health import free_port, wait_healthy

from .browser import ROOT, follow_server

SLEEP_S = 600  # longer than any test waits: the run is still going when the test acts
WRAPPER = """
import runpy, time
import streamlit as st
import views.chrome.frame as chrome
if not getattr(chrome, "_tpe_slowed", False):
    drawn = chrome.page_header
    def slow_header(*args, **kwargs):
        drawn(*args, **kwargs)
        if {mark!r} is None or {mark!r} in str(st.session_state.get("req_question", "")):
            time.sleep({sleep})
    chrome.page_header, chrome._tpe_slowed = slow_header, True
runpy.run_path({app!r}, run_name="__main__")
"""


@contextlib.contextmanager
def slowed_app_server(folder: Path, log_name: str, cache_dir: Path, mark: str | None = None,
                      host: str = "127.0.0.1"):
    """Yields (url, the server's process) of app.py with its page slowed (see above); the wrapper script is written
    in `folder`, the server's output goes to artifacts/log_name. The server is killed after (a sleeping run would
    hold a polite stop)."""
    script = folder / "slowed_app.py"
    script.write_text(WRAPPER.format(app=str(ROOT / "app.py"), mark=mark, sleep=SLEEP_S))
    port = free_port()
    env = {**os.environ, "TPE_CACHE_DIR": str(cache_dir), "TPE_WARM_UP": "request"}
    (ROOT / "artifacts").mkdir(exist_ok=True)
    with open(ROOT / "artifacts" / log_name, "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(script), "--server.port", str(port)],
                                  cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
        url = f"http://{host}:{port}"
        followed = follow_server(f"slowed server {url}", ROOT / "artifacts" / log_name)  # a failure's report
        try:
            if not wait_healthy(url):
                pytest.fail("the Streamlit server did not start")
            yield url, server
        finally:
            followed["ended"] = time.monotonic()
            server.kill()
            server.wait(timeout=30)
