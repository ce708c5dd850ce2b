"""SDK clients streaming beside a room's learners: do the learners keep their pace while clients use the API?

Two conditions on one server, interleaved and repeated (round r runs "alone" then "beside", the next the other way
round, so a drift of the machine's load falls on both sides):
  alone  = LEARNERS learners ask new questions (the room bench's learner: bench/workshop_load.py's websocket session,
           Streamlit's own protocol, Journey with the question in its link, timed to the page's end);
  beside = the same, while CLIENTS clients of the official openai SDK stream answers the whole time (each its own
           question, again and again, temperature 0).
Printed: errors (any learner's or client's), cross-talk (a learner's page that does not carry its own question or
carries another's; a client's streamed text that is not the greedy answer its question got alone, asked once before
the rounds), and the learners' time to a complete page: p50 and p95 per round, the median over the rounds with their
range, and the ratio of the medians of p95 beside / alone (the target: at most 1.5x).

Run: .venv/bin/python bench/api_beside_learners.py [--rounds 3] [--learners 8] [--clients 8] [--quick]
     [--base-url http://localhost:8501]
Without --base-url it starts server.py on a free port (as ./run.sh does) and stops it at the end, with a cache folder
of its own for the runs it stores (the weights linked from TPE_CACHE_DIR): every learner's question is new, never
served from runs stored by an earlier run of this bench.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import statistics
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import quote

import openai
from agent_traffic import MODEL, ROOT, started_server  # bench/ is this script's folder
from workshop_load import DONE_MARK, QUESTIONS, check_cross_talk, new_result, page_messages, wait_for_quiet_queue

CLIENT_TOKENS = 32  # each client answer: long enough to stream for a while, short enough to ask again and again
CLIENT_QUESTIONS = ["Write a haiku about rivers.", "List three uses of copper.", "Describe a lighthouse at night.",
                    "Explain what a compass does.", "Give two tips for baking bread.", "What does a glacier carve?",
                    "Name a few desert animals.", "How does a bicycle gear work?", "Why do owls hunt at night?",
                    "Summarise how tides happen."]
LEARNER_STAGGER_S = 0.3  # learners do not all click in the same millisecond (the room bench's spacing)
LOG_NAME = "api_beside_learners_server.log"


async def learner(url: str, question: str, others: list[str], timeout: float) -> dict:
    """One learner opening Journey with a new question, over Streamlit's websocket protocol (the room bench's
    protocol session, its first visit only): seconds to the page's end, and whether it carried its own request."""
    import websockets

    result = new_result(question, [])
    t0 = time.monotonic()
    try:
        sent = b""
        async with websockets.connect(url.replace("http", "ws", 1) + "/_stcore/stream", subprotocols=["streamlit"],
                                      max_size=None, open_timeout=timeout) as ws:
            async for kind, raw in page_messages(ws, f"q={quote(question)}", "journey", timeout):
                sent += raw
                if kind != "script_finished" and time.monotonic() - t0 > timeout:
                    raise TimeoutError(f"no complete page after {timeout:.0f} s")
        result["seconds"] = time.monotonic() - t0
        if b"Traceback" in sent or DONE_MARK.encode() not in sent:
            raise RuntimeError("the page did not run to its end")
        check_cross_talk(result, sent.decode("utf-8", "replace"), others)
    except Exception as e:  # reported, never raised: one learner's failure must not stop the count
        result["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    return result


async def room(url: str, questions: list[str], timeout: float) -> list[dict]:
    tasks = []
    for q in questions:
        others = [o for o in questions if o != q]
        tasks.append(asyncio.create_task(learner(url, q, others, timeout)))
        await asyncio.sleep(LEARNER_STAGGER_S)
    return list(await asyncio.gather(*tasks))


def sdk(url: str, name: str) -> openai.OpenAI:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=os.environ.get("TPE_API_KEY") or "unused", max_retries=0,
                           timeout=600)
    return client.with_options(default_headers={"User-Agent": f"{client.user_agent} api_beside_learners/{name}"})


def streamed(client: openai.OpenAI, question: str) -> str:
    chunks = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": question}],
                                            max_tokens=CLIENT_TOKENS, temperature=0, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


class Client(threading.Thread):
    """One SDK client streaming its own question until told to stop; counts its answers, errors and mix-ups."""

    def __init__(self, url: str, index: int, question: str, expected: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.client, self.question, self.expected, self.stop = sdk(url, f"client-{index}"), question, expected, stop
        self.answers, self.errors, self.cross_talk = 0, [], []
        self.started = threading.Event()  # its first stream is under way

    def run(self) -> None:
        while not self.stop.is_set():
            self.started.set()
            try:
                text = streamed(self.client, self.question)
            except Exception as e:  # counted, and the client goes on asking, as a real one would
                self.errors.append(f"{type(e).__name__}: {str(e)[:200]}")
                continue
            self.answers += 1
            if text != self.expected:
                self.cross_talk.append(text[:80])


def one_round(url: str, questions: list[str], client_questions: list[str], expected: dict[str, str],
              timeout: float) -> dict:
    """The learners' round, with clients streaming beside them when client_questions is not empty."""
    stop = threading.Event()
    clients = [Client(url, i, q, expected[q], stop) for i, q in enumerate(client_questions)]
    for c in clients:
        c.start()
    for c in clients:
        c.started.wait()
    try:
        learners = asyncio.run(room(url, questions, timeout))
    finally:
        stop.set()
        for c in clients:
            c.join()
    return {"seconds": [r["seconds"] for r in learners if r["seconds"] is not None],
            "errors": [f"learner {r['question']!r}: {r['error']}" for r in learners if r["error"]]
            + [f"client {c.question!r}: {e}" for c in clients for e in c.errors],
            "cross_talk": [f"learner {r['question']!r}: {r['cross_talk_seen']}" for r in learners if r["cross_talk"]]
            + [f"client {c.question!r} got {t!r}" for c in clients for t in c.cross_talk],
            "client_answers": sum(c.answers for c in clients)}


def p95(xs: list[float]) -> float:
    from pipeline.costs.metrics import percentile

    return percentile(xs, 95)


STORED = {"runs", "room", "results", "serving", "verdicts.json", "verdicts.json.lock"}  # what a server writes


@contextlib.contextmanager
def own_cache():
    """TPE_CACHE_DIR for the started server: a new folder whose model weights link to the shared cache's."""
    shared = Path(os.environ.get("TPE_CACHE_DIR") or Path.home() / ".cache" / "token-pipeline-explorer")
    with tempfile.TemporaryDirectory(prefix="api-beside-learners-") as folder:
        for entry in shared.iterdir():
            if entry.name not in STORED and not entry.name.endswith(".lock"):
                (Path(folder) / entry.name).symlink_to(entry)
        before = os.environ.get("TPE_CACHE_DIR")
        os.environ["TPE_CACHE_DIR"] = folder
        try:
            yield folder
        finally:
            if before is None:
                os.environ.pop("TPE_CACHE_DIR")
            else:
                os.environ["TPE_CACHE_DIR"] = before


def run(url: str, rounds: int, learners: int, clients: int, timeout: float) -> dict:
    client_questions = [CLIENT_QUESTIONS[i % len(CLIENT_QUESTIONS)] + ("" if i < len(CLIENT_QUESTIONS) else f" ({i})")
                        for i in range(clients)]
    reference = sdk(url, "reference")
    expected = {q: streamed(reference, q) for q in client_questions}  # each alone, once: the greedy answer
    if len(set(expected.values())) < len(expected):
        print("note: two client questions have the same answer, so a mix-up between them would not show")
    asked, tag = iter(range(10**6)), secrets.token_hex(3)

    def questions() -> list[str]:  # new questions every round and every run: none is served from a store of runs
        n = next(asked)
        return [f"{QUESTIONS[(n * learners + i) % len(QUESTIONS)]} ({tag}: round {n}, learner {i})"
                for i in range(learners)]
    one_round(url, questions(), [], expected, timeout)  # warm: the pages' first runs, not measured
    log = ROOT / "artifacts" / LOG_NAME
    if log.exists():
        wait_for_quiet_queue(str(log), 5.0, limit_s=120.0)
    out = {"alone": [], "beside": []}
    for r in range(rounds):
        for side in (("alone", "beside") if r % 2 == 0 else ("beside", "alone")):
            result = one_round(url, questions(), client_questions if side == "beside" else [], expected, timeout)
            out[side].append(result)
            s = result["seconds"]
            print(f"round {r + 1} {side:<6}: learners p50 {statistics.median(s):5.1f} s, p95 {p95(s):5.1f} s"
                  + (f"; {result['client_answers']} client answers streamed" if side == "beside" else "")
                  + f"; errors {len(result['errors'])}, cross-talk {len(result['cross_talk'])}", flush=True)
    return out


def report(out: dict, learners: int, clients: int) -> float:
    errors = [e for side in out.values() for r in side for e in r["errors"]]
    mixed = [e for side in out.values() for r in side for e in r["cross_talk"]]
    print(f"\n{learners} learners, alone and beside {clients} streaming SDK clients, {len(out['alone'])} rounds each")
    print(f"  errors: {len(errors)}" + "".join(f"\n    {e}" for e in errors[:5]))
    print(f"  cross-talk: {len(mixed)}" + "".join(f"\n    {e}" for e in mixed[:5]))
    print(f"  client answers streamed: {sum(r['client_answers'] for r in out['beside'])}")
    medians = {}
    for side, results in out.items():
        p50s = [statistics.median(r["seconds"]) for r in results]
        p95s = [p95(r["seconds"]) for r in results]
        medians[side] = statistics.median(p95s)
        print(f"  learners {side:<6}: p50 {statistics.median(p50s):5.1f} s ({min(p50s):.1f}-{max(p50s):.1f}), "
              f"p95 {medians[side]:5.1f} s ({min(p95s):.1f}-{max(p95s):.1f}) over the rounds")
    ratio = medians["beside"] / medians["alone"]
    print(f"  learners' p95 beside / alone: {ratio:.2f}x (target: at most 1.5x)")
    return ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", help="a running server (./run.sh); without it server.py is started here")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each condition (default 3)")
    parser.add_argument("--learners", type=int, default=8)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=600.0, help="per learner's page, seconds")
    parser.add_argument("--quick", action="store_true", help="1 round of 2 learners beside 2 clients: a check")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.learners, args.clients = 1, 2, 2
    (ROOT / "artifacts").mkdir(exist_ok=True)
    with contextlib.ExitStack() as stack:
        if args.base_url:
            url = args.base_url.rstrip("/")
        else:
            stack.enter_context(own_cache())
            url = stack.enter_context(started_server(LOG_NAME))
        out = run(url, args.rounds, args.learners, args.clients, args.timeout)
    report(out, args.learners, args.clients)
    errors = sum(len(r["errors"]) + len(r["cross_talk"]) for side in out.values() for r in side)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
