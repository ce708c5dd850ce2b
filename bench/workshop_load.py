"""A room of learners against a running server: N real browser sessions (Playwright + Chromium).

  ./run.sh app &                                   # or any running server
  .venv/bin/python bench/workshop_load.py --url http://localhost:8501 --sessions 30 [--pid SERVER_PID]

Each session opens the Journey page with its own question in the link (?q=...), as a learner
following a shared link would, and waits until the page is complete. Then every session opens the
same link again (a question someone already asked: served from the store). Reports: errors,
cross-talk (every session must show its own question's tokens and no one else's), p50/p95 time to
a complete page for new and for already-asked questions, the queue positions learners saw, and the
server's peak memory (RSS of --pid, sampled every 0.5 s; found from the port when not given).
Traffic goes to the given URL only (loopback), and the run is bounded by --timeout.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from urllib.parse import quote

QUESTIONS = ["Are tomatoes fruit?", "Why is the sky blue?", "What is a prime number?", "How do bees make honey?",
             "What is photosynthesis?", "Name three planets.", "What is the capital of France?",
             "How does rain form?", "What is a verb?", "Why do cats purr?", "What is gravity?",
             "How many legs does a spider have?", "What is an atom?", "Why do leaves change colour?",
             "What is a volcano?", "How do magnets work?", "What is DNA?", "Why is the sea salty?",
             "What is a rainbow?", "How do plants drink water?", "What is the moon made of?",
             "What is a fraction?", "Why do we sleep?", "What is electricity?", "How do birds fly?",
             "What is a galaxy?", "Why is ice slippery?", "What is a noun?", "How do fish breathe?",
             "What is an island?", "What are clouds made of?", "Why do onions make us cry?"]
DONE_MARK = "This run took"  # Journey's last caption: the page has rendered to the end


def server_pid(url: str) -> int | None:
    port = re.search(r":(\d+)", url.split("//", 1)[-1])
    if not port:
        return None
    out = subprocess.run(["bash", "-c", f"ss -ltnp 'sport = :{port.group(1)}' | grep -o 'pid=[0-9]*' | head -1"],
                         capture_output=True, text=True).stdout
    return int(out.strip()[4:]) if out.strip() else None


class RssSampler(threading.Thread):
    def __init__(self, pid: int | None):
        super().__init__(daemon=True)
        self.pid, self.peak_mb, self.stop = pid, 0.0, False

    def run(self):
        while not self.stop and self.pid:
            try:
                with open(f"/proc/{self.pid}/status") as f:
                    rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024
                self.peak_mb = max(self.peak_mb, rss)
            except (OSError, AttributeError):
                return
            time.sleep(0.5)


async def one_session(browser, url: str, question: str, others: list[str], timeout: float) -> dict:
    ctx = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await ctx.new_page()
    outside: list[str] = []
    host = url.split("//", 1)[-1].split("/", 1)[0]
    page.on("request", lambda r: outside.append(r.url) if host not in r.url and not r.url.startswith("data:") else None)
    result = {"question": question, "error": None, "seconds": None, "again_seconds": None, "positions": [],
              "cross_talk": False, "outside_requests": outside}
    link = f"{url}/journey?q={quote(question)}"
    try:
        for attempt in ("seconds", "again_seconds"):
            t0 = time.monotonic()
            await page.goto(link, timeout=timeout * 1000)
            while True:
                body = await page.inner_text("body")
                seen = re.search(r"number (\d+) in line", body)
                if seen:
                    result["positions"].append(int(seen.group(1)))
                if DONE_MARK in body:
                    break
                if "Traceback" in body or "Please fix the request" in body:
                    raise RuntimeError(body[:300])
                if time.monotonic() - t0 > timeout:
                    raise TimeoutError(f"no complete page after {timeout:.0f} s")
                await asyncio.sleep(0.5)
            result[attempt] = time.monotonic() - t0
            chips = await page.inner_text("body")
            first_word = question.split()[1] if len(question.split()) > 1 else question
            result["cross_talk"] |= first_word not in chips or any(o in chips for o in others)
    except Exception as e:  # reported, never raised: one learner's failure must not stop the count
        result["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    finally:
        await ctx.close()
    return result


async def main_async(args) -> int:
    from playwright.async_api import async_playwright

    questions = [QUESTIONS[i % len(QUESTIONS)] + ("" if i < len(QUESTIONS) else f" ({i})") for i in range(args.sessions)]
    sampler = RssSampler(args.pid or server_pid(args.url))
    sampler.start()
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        t0 = time.monotonic()
        tasks = []
        for i, q in enumerate(questions):
            others = [o for o in questions if o != q and o not in q and q not in o]
            tasks.append(one_session(browser, args.url, q, others, args.timeout))
            await asyncio.sleep(args.stagger)  # learners do not all click in the same millisecond
        results = await asyncio.gather(*tasks)
        await browser.close()
    sampler.stop = True
    wall = time.monotonic() - t0

    def pct(xs, q):
        xs = sorted(x for x in xs if x is not None)
        return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")

    new = [r["seconds"] for r in results]
    again = [r["again_seconds"] for r in results]
    errors = [r for r in results if r["error"]]
    print(f"{args.sessions} sessions against {args.url} in {wall:.0f} s")
    print(f"  errors: {len(errors)}" + "".join(f"\n    {r['question']}: {r['error']}" for r in errors[:5]))
    print(f"  cross-talk: {sum(r['cross_talk'] for r in results)}")
    print(f"  requests to other hosts: {sum(len(r['outside_requests']) for r in results)}")
    print(f"  new question, time to a complete page: p50 {pct(new, .5):.1f} s, p95 {pct(new, .95):.1f} s, "
          f"max {pct(new, 1):.1f} s")
    print(f"  question already asked:                p50 {pct(again, .5):.1f} s, p95 {pct(again, .95):.1f} s")
    seen = sorted({p for r in results for p in r["positions"]})
    print(f"  queue positions seen: {seen[:10]}{' ...' if len(seen) > 10 else ''} (highest {max(seen, default=0)})")
    print(f"  server peak RSS: {sampler.peak_mb:,.0f} MB" + ("" if sampler.pid else " (server pid not found)"))
    return 0 if not errors else 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://localhost:8501")
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=600.0, help="per page, seconds")
    ap.add_argument("--stagger", type=float, default=0.3, help="seconds between two learners arriving")
    ap.add_argument("--pid", type=int, default=None)
    args = ap.parse_args()
    if not re.match(r"https?://(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?$", args.url):
        print("error: --url must be a loopback address (this benchmark never targets another machine)")
        return 2
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
