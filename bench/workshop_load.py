"""A room of learners against a running server: N sessions, in real browsers (Playwright + Chromium)
or speaking Streamlit's websocket protocol.

  ./run.sh app &                                   # or any running server
  .venv/bin/python bench/workshop_load.py --url http://localhost:8501 --sessions 30 [--browsers 3] [--pid PID]

Each session opens the Journey page with its own question in the link (?q=...), as a learner
following a shared link would, and waits until the page is complete. Then every session opens the
same link again (a question someone already asked: served from the store). Reports: errors,
cross-talk (every session must be sent its own question's request and no one else's), p50/p95 time
to a complete page for new and for already-asked questions, the queue positions learners saw, the
server's peak memory (RSS of --pid, sampled every 0.5 s; found from the port when not given) and
where the machine's CPU time went.

In a real room each learner's browser runs on their own laptop. Here the browsers share the
server's two cores: 30 Chromium pages took 763 CPU-s of a 898 CPU-s run and left the model 116 s,
so the figures measured the browsers. --browsers K keeps K real browsers (the pages are drawn
and checked) and runs the other sessions over the protocol: the same messages from the server,
not drawn. Traffic goes to the given URL only (loopback), and the run is bounded by --timeout.

--server-log LOG --quiet-before 8: the room arrives once the server's queue has logged nothing for 8 s, i.e.
after its warm-up (the default request, then the prompt-caching scenarios as background jobs, ~25 s of work
after the first visit), as on a server started before the class; without it a room that arrives early
shares the queue with the last of those jobs.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
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
DONE_MARK = "This run took"  # Journey's last caption: the server has sent the page to its end
# ...and the browser has drawn it: no placeholder left (code blocks, tables and charts load their
# code lazily) and every chart has its SVG.
DRAWN_JS = """() => document.querySelectorAll('[data-testid="stSkeleton"]').length === 0 &&
  [...document.querySelectorAll('[data-testid="stPlotlyChart"]')].every(c => c.querySelector('.main-svg'))"""




def server_pid(url: str) -> int | None:
    port = re.search(r":(\d+)", url.split("//", 1)[-1])
    if not port:
        return None
    out = subprocess.run(["bash", "-c", f"ss -ltnp 'sport = :{port.group(1)}' | grep -o 'pid=[0-9]*' | head -1"],
                         capture_output=True, text=True).stdout
    return int(out.strip()[4:]) if out.strip() else None


class RssSampler(threading.Thread):
    """Peak memory and CPU time of the server processes (several replicas: their sum and each one)."""

    def __init__(self, pids: list[int]):
        super().__init__(daemon=True)
        self.pids, self.peak_mb, self.stop = pids, 0.0, False
        self.peak_each = {pid: 0.0 for pid in pids}
        self.cpu_start = self.cpu_now()

    @staticmethod
    def _ticks(path: str, fields: slice) -> int | None:
        try:
            with open(path) as f:
                line = f.readline() if path == "/proc/stat" else f.read().rsplit(")", 1)[1]
            return sum(int(x) for x in line.split()[fields])
        except (OSError, IndexError, ValueError):
            return None

    def cpu_now(self) -> tuple[dict[int, int | None], int | None]:
        """({pid: user+system ticks}, the whole machine's busy ticks) since boot."""
        servers = {pid: self._ticks(f"/proc/{pid}/stat", slice(11, 13)) for pid in self.pids}
        return servers, self._ticks("/proc/stat", slice(1, 4))  # user, nice, system

    def cpu_seconds(self) -> tuple[dict[int, float], float]:
        """({pid: CPU seconds during the run}, the machine's busy CPU seconds during the run)."""
        (s0, m0), (s1, m1) = self.cpu_start, self.cpu_now()
        hz = os.sysconf("SC_CLK_TCK")
        each = {pid: (s1[pid] - s0[pid]) / hz for pid in self.pids if s0[pid] is not None and s1[pid] is not None}
        return each, (m1 - m0) / hz

    def run(self):
        while not self.stop and self.pids:
            total = 0.0
            for pid in self.pids:
                try:
                    with open(f"/proc/{pid}/status") as f:
                        rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024
                except (OSError, AttributeError):
                    continue  # a replica that died (the fault test) no longer counts
                self.peak_each[pid] = max(self.peak_each[pid], rss)
                total += rss
            self.peak_mb = max(self.peak_mb, total)
            time.sleep(0.5)


def new_result(question: str, outside_requests: list[str]) -> dict:
    return {"question": question, "error": None, "seconds": None, "again_seconds": None, "positions": [],
            "cross_talk": False, "outside_requests": outside_requests, "served": {}}


def check_cross_talk(result: dict, page_text: str, others: list[str]) -> None:
    """The Journey page prints the request's JSON body: the learner's own question must be in it,
    verbatim (JSON escapes nothing in these ASCII questions), and no other learner's question."""
    own = f'"content": "{result["question"]}"' in page_text
    foreign = [o for o in others if f'"content": "{o}"' in page_text]
    if not own or foreign:
        result["cross_talk"] = True
        result["cross_talk_seen"] = f"own question {'present' if own else 'missing'}; others present: {foreign[:3]}"


async def one_session(browser, url: str, question: str, others: list[str], timeout: float) -> dict:
    ctx = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await ctx.new_page()
    outside: list[str] = []
    host = url.split("//", 1)[-1].split("/", 1)[0]
    page.on("request", lambda r: outside.append(r.url) if host not in r.url and not r.url.startswith("data:") else None)
    result = new_result(question, outside)
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
                if DONE_MARK in body and result["served"].get(attempt) is None:
                    result["served"][attempt] = time.monotonic() - t0  # the server has sent the whole page
                if DONE_MARK in body and await page.evaluate(DRAWN_JS):
                    break
                if "Traceback" in body or "Please fix the request" in body:
                    raise RuntimeError(body[:300])
                if time.monotonic() - t0 > timeout:
                    raise TimeoutError(f"no complete page after {timeout:.0f} s")
                await asyncio.sleep(0.5)
            result[attempt] = time.monotonic() - t0
            check_cross_talk(result, await page.evaluate("document.body.textContent"), others)
    except Exception as e:  # reported, never raised: one learner's failure must not stop the count
        result["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    finally:
        await ctx.close()
    return result


async def page_messages(ws, query_string: str, page_name: str, timeout: float):
    """Ask the server for one page over Streamlit's websocket (the BackMsg a browser sends) and yield
    each ForwardMsg as (its type, its bytes) until the script has finished."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    back = BackMsg()
    back.rerun_script.query_string = query_string
    back.rerun_script.page_name = page_name
    await ws.send(back.SerializeToString())
    while True:
        msg = ForwardMsg()
        msg.ParseFromString(await asyncio.wait_for(ws.recv(), timeout))
        kind = msg.WhichOneof("type")
        yield kind, msg.SerializeToString()
        if kind == "script_finished":
            return


async def one_protocol_session(url: str, question: str, others: list[str], timeout: float) -> dict:
    """A learner without a browser: Streamlit's own websocket protocol, the messages a browser would
    get, not drawn. Measures the server alone (the browsers of a real room run on other machines)."""
    import websockets

    result = new_result(question, [])
    stream = url.replace("http", "ws", 1) + "/_stcore/stream"
    try:
        for attempt in ("seconds", "again_seconds"):
            t0 = time.monotonic()
            async with websockets.connect(stream, subprotocols=["streamlit"], max_size=None,
                                          open_timeout=timeout) as ws:
                sent = b""
                async for kind, raw in page_messages(ws, f"q={quote(question)}", "journey", timeout):
                    sent += raw
                    for seen in re.finditer(rb"number (\d+) in line", raw):
                        result["positions"].append(int(seen.group(1)))
                    if kind != "script_finished" and time.monotonic() - t0 > timeout:
                        raise TimeoutError(f"no complete page after {timeout:.0f} s")
            result[attempt] = result["served"][attempt] = time.monotonic() - t0
            if b"Traceback" in sent or DONE_MARK.encode() not in sent:
                raise RuntimeError("the page did not run to its end")
            check_cross_talk(result, sent.decode("utf-8", "replace"), others)
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    return result


async def main_async(args) -> int:
    from playwright.async_api import async_playwright

    questions = [QUESTIONS[i % len(QUESTIONS)] + ("" if i < len(QUESTIONS) else f" ({i})")
                 for i in range(args.sessions)]
    pids = [int(p) for p in args.pid.split(",")] if args.pid else [pid for pid in [server_pid(args.url)] if pid]
    sampler = RssSampler(pids)
    sampler.start()
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        t0 = time.monotonic()
        tasks = []
        for i, q in enumerate(questions):
            others = [o for o in questions if o != q and o not in q and q not in o]
            in_browser = i < (args.sessions if args.browsers is None else args.browsers)
            tasks.append(asyncio.create_task(  # started now: learners arrive one after another
                one_session(browser, args.url, q, others, args.timeout) if in_browser
                else one_protocol_session(args.url, q, others, args.timeout)))
            await asyncio.sleep(args.stagger)  # learners do not all click in the same millisecond
        results = await asyncio.gather(*tasks)
        await browser.close()
    sampler.stop = True
    wall = time.monotonic() - t0

    def pct(xs, q):
        xs = sorted(x for x in xs if x is not None)
        return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")

    new_served = [r["served"].get("seconds") for r in results]
    again_served = [r["served"].get("again_seconds") for r in results]
    new = [r["seconds"] for r in results]
    again = [r["again_seconds"] for r in results]
    errors = [r for r in results if r["error"]]
    browsers = args.sessions if args.browsers is None else min(args.browsers, args.sessions)
    print(f"{args.sessions} sessions ({browsers} in Chromium, {args.sessions - browsers} over the websocket "
          f"protocol) against {args.url} in {wall:.0f} s")
    print(f"  errors: {len(errors)}" + "".join(f"\n    {r['question']}: {r['error']}" for r in errors[:5]))
    print(f"  cross-talk: {sum(r['cross_talk'] for r in results)}" + "".join([
        f"\n    {r['question']}: {r['cross_talk_seen']}" for r in results if r["cross_talk"]][:5]))
    print(f"  requests to other hosts: {sum(len(r['outside_requests']) for r in results)}")
    print(f"  new question, time to a complete page: p50 {pct(new, .5):.1f} s, p95 {pct(new, .95):.1f} s, "
          f"max {pct(new, 1):.1f} s")
    print(f"  question already asked:                p50 {pct(again, .5):.1f} s, p95 {pct(again, .95):.1f} s")
    print(f"  ... of which the server had sent the whole page (its last line on screen): new p50 "
          f"{pct(new_served, .5):.1f} s, p95 {pct(new_served, .95):.1f} s; already asked p50 "
          f"{pct(again_served, .5):.1f} s, p95 {pct(again_served, .95):.1f} s")
    server_cpu, machine_cpu = sampler.cpu_seconds()
    if server_cpu:
        each = "" if len(server_cpu) < 2 else " (" + ", ".join(f"{s:,.0f}" for s in server_cpu.values()) + ")"
        print(f"  CPU time during the run: server{'s' if len(server_cpu) > 1 else ''} {sum(server_cpu.values()):,.0f} s"
              f"{each}, everything else on the machine (browsers, this script, the balancer, other load) "
              f"{machine_cpu - sum(server_cpu.values()):,.0f} s; {os.cpu_count()} cores x {wall:.0f} s = "
              f"{os.cpu_count() * wall:,.0f} s available")
    seen = sorted({p for r in results for p in r["positions"]})
    print(f"  queue positions seen: {seen[:10]}{' ...' if len(seen) > 10 else ''} (highest {max(seen, default=0)})")
    each = "" if len(pids) < 2 else " (each: " + ", ".join(f"{m:,.0f}" for m in sampler.peak_each.values()) + " MB)"
    print(f"  server peak RSS: {sampler.peak_mb:,.0f} MB{each}" + ("" if pids else " (server pid not found)"))
    if args.server_log:
        mid_batch_report(args.server_log)
    return 0 if not errors else 1


LEFT_LINE = re.compile(r"request \d+ left: waited ([\d.]+) s, prefill ([\d.]+) s, first token ([\d.]+) s after its "
                       r"prefill \(that step ([\d.]+) s, batch of (\d+)\)")


def mid_batch_report(path: str) -> None:
    """From the server's log (pipeline.server.run_queue logs each request leaving the running batch): for the
    requests that joined a batch already running, the time from the end of their own prefill to their first
    token, against the step that made it (other prompts prefilled in the same gap between two steps add theirs)."""
    with open(path, errors="replace") as f:
        rows = [tuple(float(x) for x in m.groups()) for m in LEFT_LINE.finditer(f.read())]
    joined = [r for r in rows if r[4] > 1]
    if not joined:
        print(f"  mid-batch arrivals: none in {path}")
        return
    after, step = [r[2] for r in joined], [r[3] for r in joined]
    within = sum(a <= s + 0.05 for a, s in zip(after, step))
    q = lambda xs, p: sorted(xs)[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]  # noqa: E731
    print(f"  mid-batch arrivals ({len(joined)} of {len(rows)} requests joined a running batch): their own prefill "
          f"p50 {q([r[1] for r in joined], .5):.2f} s; from its end to their first token p50 {q(after, .5):.2f} s, "
          f"p95 {q(after, .95):.2f} s; the step that made it p50 {q(step, .5):.2f} s, p95 {q(step, .95):.2f} s; "
          f"within their own prefill + one step: {within} of {len(joined)} (the others also waited for prompts "
          f"prefilled in the same gap)")


def wait_for_quiet_queue(server_log: str, quiet_s: float, limit_s: float = 300.0) -> tuple[float, bool]:
    """Wait until the server log has had no pipeline.server.run_queue line for quiet_s seconds, at most limit_s;
    returns (seconds waited, whether it was quiet)."""
    start = time.monotonic()
    seen, since = -1, start
    while time.monotonic() - start < limit_s:
        with open(server_log, encoding="utf-8", errors="replace") as f:
            lines = sum("pipeline.server.run_queue" in line for line in f)
        if lines != seen:
            seen, since = lines, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return time.monotonic() - start, True
        time.sleep(0.5)
    return time.monotonic() - start, False


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://localhost:8501")
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=600.0, help="per page, seconds")
    ap.add_argument("--stagger", type=float, default=0.3, help="seconds between two learners arriving")
    ap.add_argument("--pid", default=None, help="the server's process id; replicas: their ids, comma-separated")
    ap.add_argument("--browsers", type=int, default=None,
                    help="how many of the sessions run in Chromium (default: all); the others speak Streamlit's "
                         "websocket protocol without drawing, so the browsers do not eat the server's CPU")
    ap.add_argument("--server-log", default=None, help="the server's console log: reports how soon a request that "
                    "joined a running batch got its first token (pipeline.server.run_queue logs each request leaving)")
    ap.add_argument("--quiet-before", type=float, default=0.0, metavar="S",
                    help="with --server-log: the room arrives once the server's queue has logged nothing for S "
                         "seconds (its warm-up's background jobs done, as on a server started before the class)")
    args = ap.parse_args()
    if args.quiet_before and args.server_log:
        waited, quiet = wait_for_quiet_queue(args.server_log, args.quiet_before)
        print(f"the server's queue was quiet for {args.quiet_before:g} s after {waited:.0f} s of waiting" if quiet
              else f"the server's queue was still busy after {waited:.0f} s: the room arrives anyway")
    if not re.match(r"https?://(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?$", args.url):
        print("error: --url must be a loopback address (this benchmark never targets another machine)")
        return 2
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
