"""Cold start: a fresh server process until its first page with real numbers is complete.

  .venv/bin/python bench/cold_start_bench.py [--repeats 5]

The default request's run must be stored (the bench stores it first if needed). Each repeat starts
`streamlit run app.py` on a free port and, as soon as the port answers, asks for the Journey page
over Streamlit's websocket protocol (the messages a browser gets, not drawn); the time is from the
process start to the page's last message ("This run took ..."). Also printed: when the server
answered, and the same page opened in a fresh Python with AppTest (no server) — once as the app
does it (the network loads after the page), once waiting for the network first, as before the
model handle (so the saving is measured in the same run, interleaved). Medians with the range.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

from workshop_load import page_messages  # bench/ is this script's folder

from pipeline.server.health import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DONE_MARK = b"This run took"  # Journey's last caption
LAST_ELEMENT = b"Forward passes run for your session"  # the sidebar's caption, drawn after the page
PAGE_IN_APPTEST = """
import sys, time
t0 = time.perf_counter()
{before}
from streamlit.testing.v1 import AppTest
at = AppTest.from_file('views/pages/journey.py', default_timeout=600)
at.run()
assert not at.exception, at.exception
assert any('This run took' in c.value for c in at.caption)
print(time.perf_counter() - t0, 'torch' in sys.modules)
"""
LOAD_FIRST = "from pipeline.model.loader import shared_model; shared_model()"


async def journey_over_websocket(port: int, t0: float, timeout: float = 120) -> dict:
    """Seconds from t0 until: the server accepted the websocket ('up'), the first element arrived
    ('first'), the page's last element (the sidebar's model caption) arrived ('drawn'), the script
    finished ('finished': the server's own after-page work included)."""
    import websockets

    while True:
        try:
            ws = await websockets.connect(f"ws://127.0.0.1:{port}/_stcore/stream", subprotocols=["streamlit"],
                                          max_size=None, open_timeout=2)
            break
        except OSError:
            if time.monotonic() - t0 > timeout:
                raise
            await asyncio.sleep(0.02)
    marks = {"up": time.monotonic() - t0}
    async with ws:
        sent = b""
        async for kind, raw in page_messages(ws, "", "journey", timeout):
            sent += raw
            now = time.monotonic() - t0
            if kind == "delta":
                marks.setdefault("first", now)
            if LAST_ELEMENT in raw:
                marks["drawn"] = now
            if kind == "script_finished":
                marks["finished"] = now
    if b"Traceback" in sent or DONE_MARK not in sent or "drawn" not in marks:
        raise RuntimeError("the Journey page did not run to its end")
    return marks


def server_cold_start() -> dict:
    port = free_port()
    t0 = time.monotonic()
    proc = subprocess.Popen([os.path.join(ROOT, ".venv", "bin", "streamlit"), "run", "app.py",
                             "--server.port", str(port), "--server.headless", "true"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return asyncio.run(journey_over_websocket(port, t0))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def apptest_cold_start(before: str = "") -> tuple[float, bool]:
    out = subprocess.run([sys.executable, "-c", PAGE_IN_APPTEST.format(before=before)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    seconds, torch_loaded = out.stdout.split()[-2:]
    return float(seconds), torch_loaded == "True"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    apptest_cold_start()  # stores the default run if it is not stored yet (and warms the disk cache)
    server, page, page_torch, loaded_first = [], [], [], []
    for _ in range(args.repeats):  # interleaved, so load on a shared machine hits every variant alike
        server.append(server_cold_start())
        seconds, torch_loaded = apptest_cold_start()
        page.append(seconds)
        page_torch.append(torch_loaded)
        loaded_first.append(apptest_cold_start(LOAD_FIRST)[0])
    med = statistics.median
    span = lambda xs: f"{min(xs):.2f}-{max(xs):.2f}"  # noqa: E731
    print(f"cold start to Journey with the default run stored, {args.repeats} interleaved repeats (median, range):")
    print("  a fresh server process, Journey over the websocket (seconds from the process start):")
    for mark, what in (("up", "the server answers"), ("first", "first element"),
                       ("drawn", "page complete (its last element sent)"),
                       ("finished", "script finished (after-page work: loading starts, warm-up queued)")):
        xs = [m[mark] for m in server]
        print(f"    {what:66s} {med(xs):5.2f} s ({span(xs)})")
    print(f"  fresh Python, Journey in AppTest:                 {med(page):.2f} s ({span(page)}); "
          f"torch imported: {'yes' if any(page_torch) else 'no'}")
    print(f"  the same, waiting for the network first (before): {med(loaded_first):.2f} s ({span(loaded_first)}) "
          f"-> {med(page) / med(loaded_first):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
