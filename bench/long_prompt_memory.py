"""One learner with a ~4,000-token prompt walking every page: the server's memory.

  TPE_CACHE_DIR=... .venv/bin/python bench/long_prompt_memory.py [--tokens 3998] [--more-prompts 2]

Starts a real server (`streamlit run app.py` on a free port, like the browser tests), then one
session asks for every page of app.py in order over Streamlit's websocket protocol (the messages a
browser gets, not drawn), with the long prompt in the link. The server's RSS is sampled every 0.5 s
(bench/workshop_load.py's RssSampler) and the kernel's high-water mark is read per page. Prints RSS
before, right after the run (Journey, which runs the request), the peak while each page ran, the RSS
after it, and the whole walk's peak.
The server gets an empty store of runs (a fresh TPE_CACHE_DIR holding only a link to the
weights), so the run itself happens during the walk. Goal: one server ≤ 3 GB whatever one session sends.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from functools import lru_cache
from urllib.parse import quote

from workshop_load import RssSampler, page_messages  # bench/ is this script's folder

from pipeline.server.health import free_port, wait_healthy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SENTENCE = "Tomatoes are fruit because they grow from the flower and hold the seeds. "
GOAL_MB = 3 * 1024


@lru_cache(maxsize=1)
def tokenizer():
    from transformers import AutoTokenizer

    from pipeline.model.weights_cache import weights_cache_dir

    return AutoTokenizer.from_pretrained(weights_cache_dir())


def prompt_tokens(question: str) -> int:
    text = tokenizer().apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                           add_generation_prompt=True)
    return len(tokenizer()(text, add_special_tokens=False)["input_ids"])


def question_of(target: int) -> tuple[str, int]:
    per = prompt_tokens(SENTENCE * 11) - prompt_tokens(SENTENCE * 10)
    n = (target - prompt_tokens(SENTENCE)) // per + 1
    while n > 1 and prompt_tokens(SENTENCE * n) > target:
        n -= 1
    return (SENTENCE * n).strip(), prompt_tokens((SENTENCE * n).strip())


def pages() -> list[tuple[str, str]]:
    """(title, url path) of every page, in the app's order."""
    from views.chrome.page_list import PAGES

    return [(p.title, p.url) for p in PAGES]


class Peaks(RssSampler):
    """The server's memory per page. The kernel's own high-water mark (VmHWM) is read after each page and
    reset before the next (`5` into /proc/PID/clear_refs), so a temporary array that lives for a tenth
    of a second still counts; RSS is also sampled every 0.5 s for the latest value."""

    def __init__(self, pid: int):
        super().__init__([pid])
        self.pid, self.now = pid, 0.0

    def _status(self, field: str) -> float:
        with open(f"/proc/{self.pid}/status") as f:
            return int(re.search(field + r":\s+(\d+)", f.read()).group(1)) / 1024

    def mark(self) -> float:
        """The peak since the last mark (MB), then a fresh start for the next one."""
        peak = self._status("VmHWM")
        self.peak_mb = max(self.peak_mb, peak)
        with open(f"/proc/{self.pid}/clear_refs", "w") as f:
            f.write("5")
        return peak

    def run(self):
        while not self.stop:
            try:
                self.now = self._status("VmRSS")
            except (OSError, AttributeError):
                return
            time.sleep(0.5)


def notes_of(raw: bytes, notes: list[str]) -> int | None:
    """Errors, warnings and exceptions the page showed, added to `notes`; the script_finished status or None."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    msg = ForwardMsg()
    msg.ParseFromString(raw)
    if msg.WhichOneof("type") == "script_finished":
        return msg.script_finished
    element = msg.delta.new_element if msg.WhichOneof("type") == "delta" else None
    if element is not None and element.WhichOneof("type") == "plotly_chart":
        notes.append("chart")
    if element is not None and element.WhichOneof("type") == "exception":
        notes.append(f"EXCEPTION {element.exception.type}: {element.exception.message[:120]}")
    elif element is not None and element.WhichOneof("type") == "alert" and element.alert.format in (1, 2):
        notes.append(element.alert.body[:100].replace("\n", " "))  # ERROR, WARNING
    return None


async def walk(url: str, query: str, sampler: Peaks, timeout: float, only: tuple[str, ...] = ()
               ) -> list[tuple[str, float, float, float, str]]:
    """Every page (or those titled in `only`) in turn on one connection; a run that ends early for a
    rerun (st.rerun) is followed to the end of the rerun before the next page is asked for."""
    import websockets
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    rows = []
    async with websockets.connect(url.replace("http", "ws", 1) + "/_stcore/stream", subprotocols=["streamlit"],
                                  max_size=None, open_timeout=timeout) as ws:
        for title, path in pages():
            if only and title not in only:
                continue
            sampler.mark()
            t0, sent, notes, status = time.monotonic(), 0, [], None
            async for kind, raw in page_messages(ws, query, path, timeout):
                sent += len(raw)
                status = notes_of(raw, notes)
            while status == ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                raw = await asyncio.wait_for(ws.recv(), timeout)
                sent += len(raw)
                status = notes_of(raw, notes)
            time.sleep(0.6)
            rows.append((title, time.monotonic() - t0, sampler.mark(), sampler.now,
                         f"{sent / 1e6:.1f} MB sent, {notes.count('chart')} charts"
                         + "".join(f"; {n}" for n in [n for n in notes if n != "chart"][:3])))
            print(f"  {title:20s} {rows[-1][1]:6.1f} s  peak {rows[-1][2]:7,.0f} MB  after {rows[-1][3]:7,.0f} MB  "
                  f"{rows[-1][4]}", flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=3998, help="prompt length in tokens (chat template included)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: the app's own default")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per page at most")
    ap.add_argument("--more-prompts", type=int, default=0,
                    help="then this many other long prompts from the same session (Journey and Layers each)")
    args = ap.parse_args()
    question, n = question_of(args.tokens)
    print(f"prompt: {n:,} tokens ({len(question):,} characters), max_new_tokens "
          f"{args.max_new_tokens or 'as the app sets it'}")
    port = free_port()
    url = f"http://localhost:{port}"
    log = open(os.path.join(ROOT, "artifacts", "long-prompt-memory-server.log"), "w") \
        if os.path.isdir(os.path.join(ROOT, "artifacts")) else subprocess.DEVNULL
    from pipeline.model.weights_cache import weights_cache_dir

    fresh = tempfile.mkdtemp(prefix="tpe-memory-")  # an empty store of runs: the run happens in this walk
    os.symlink(weights_cache_dir(), os.path.join(fresh, weights_cache_dir().name))
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
                             "--server.headless", "true"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "TPE_CACHE_DIR": fresh})
    try:
        if not wait_healthy(url):
            print("the server did not start")
            return 1
        sampler = Peaks(proc.pid)
        sampler.start()
        time.sleep(1.0)
        sampler.mark()
        print(f"server up: {sampler.now:,.0f} MB")
        query = f"q={quote(question)}" + (f"&max_new_tokens={args.max_new_tokens}" if args.max_new_tokens else "")
        rows = asyncio.run(walk(url, query, sampler, args.timeout))
        for n in range(args.more_prompts):
            print(f"another long prompt ({n + 2}):")
            other = quote(f"Question {n + 2}. {question}")
            rows += asyncio.run(walk(url, query.replace(f"q={quote(question)}", f"q={other}"), sampler,
                                     args.timeout, only=("Journey", "Layers")))
        sampler.stop = True
        after_run = next(r[3] for r in rows if r[0] == "Journey")  # the first run
        worst = max(rows, key=lambda r: r[2])
        print(f"\nafter the run (Journey done): {after_run:,.0f} MB; peak over all {len(rows)} pages: "
              f"{sampler.peak_mb:,.0f} MB (on {worst[0]}); after the walk {rows[-1][3]:,.0f} MB")
        print(f"goal: peak <= {GOAL_MB:,} MB ({'met' if sampler.peak_mb <= GOAL_MB else 'MISSED'})")
        return 0 if sampler.peak_mb <= GOAL_MB else 1
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(fresh, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
