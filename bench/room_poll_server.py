"""`bench/room_poll_bench.py --server`: learners asking new questions on a real server, with and without a poll open
that all of them answer (its docstring says what is measured). The learner, the started server and its own store of
runs are bench/api_beside_learners.py's."""
from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import statistics
import time
from pathlib import Path

from agent_traffic import MODEL, ROOT, started_server
from api_beside_learners import LEARNER_STAGGER_S, learner, own_cache, p95
from workshop_load import QUESTIONS, wait_for_quiet_queue

from pipeline.model.weight_formats import DEFAULT_WEIGHTS
from pipeline.server.polls.store import PollStore
from pipeline.server.room import RoomStore

LOG_NAME = "room_poll_server.log"
ROOM_QUERY = {"q": "How many tokens?"}  # the presenter's stage request (its run is stored after the first view)
POLL_SHOWN = "The presenter asks".encode()  # the follow page's line over an open poll


async def follow_page(url: str, code: str, timeout: float) -> bool:
    """A learner's follow page (presenter?follow=CODE) over the websocket, to its end (its first run switches to the
    room's request and runs again): whether it drew the open poll."""
    import websockets
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    back, sent = BackMsg(), b""
    back.rerun_script.query_string, back.rerun_script.page_name = f"follow={code}", "presenter"
    async with websockets.connect(url.replace("http", "ws", 1) + "/_stcore/stream", subprotocols=["streamlit"],
                                  max_size=None, open_timeout=timeout) as ws:
        await ws.send(back.SerializeToString())
        while True:
            msg = ForwardMsg()
            msg.ParseFromString(raw := await asyncio.wait_for(ws.recv(), timeout))
            sent += raw
            if msg.WhichOneof("type") == "script_finished" and \
                    msg.script_finished != ForwardMsg.ScriptFinishedStatus.FINISHED_EARLY_FOR_RERUN:
                return POLL_SHOWN in sent


async def answer_poll(url: str, code: str, answer: tuple | None, opened: float, timeout: float) -> dict:
    """One learner's follow page, opened at the round's start; with `answer` = (poll store, poll id, session, text)
    the page shows the open poll and the answer goes through the poll store as the page's form sends it. "at":
    seconds from the round's start (the poll's opening) to the page's end, or to the answer kept."""
    out = {"error": None, "shown": False, "at": None}
    try:
        out["shown"] = await follow_page(url, code, timeout)
        if answer is not None:
            polls, poll_id, session, text = answer
            await asyncio.to_thread(polls.answer, code, poll_id, session, text)
        out["at"] = time.monotonic() - opened
    except Exception as e:  # noqa: BLE001 - counted and printed
        out["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    return out


async def one_round(url: str, questions: list[str], code: str | None, poll: tuple | None,
                    timeout: float) -> tuple[list, list]:
    """The learners' new questions, 0.3 s apart. With the room's `code`, each learner also opens its follow page at
    the round's start (both sides of the comparison: a room's learners follow it whether or not a poll is open);
    with `poll` = (store, poll_id, answers by session) that page shows the open poll and the learner answers it.
    Returns (the learners' results, the follow pages' results)."""
    opened = time.monotonic()
    answers = []
    if code is not None:
        polls, poll_id, wanted = poll if poll is not None else (None, None, {f"learner-{i}": None
                                                                              for i in range(len(questions))})
        answers = [asyncio.create_task(answer_poll(url, code, None if poll is None else (polls, poll_id, s, a),
                                                   opened, timeout)) for s, a in wanted.items()]
    tasks = []
    for q in questions:
        tasks.append(asyncio.create_task(learner(url, q, [o for o in questions if o != q], timeout)))
        await asyncio.sleep(LEARNER_STAGGER_S)
    return list(await asyncio.gather(*tasks)), list(await asyncio.gather(*answers))


def spread_of(values: list[float]) -> str:
    return f"{statistics.median(values):5.1f} s ({min(values):.1f}-{max(values):.1f})"


def run_on_server(n: int, rounds: int, timeout: float) -> int:
    (ROOT / "artifacts").mkdir(exist_ok=True)
    load = os.getloadavg()
    with contextlib.ExitStack() as stack:
        cache = stack.enter_context(own_cache())
        url = stack.enter_context(started_server(LOG_NAME))
        rooms = RoomStore(Path(cache) / "room")  # the server's own room folder (its TPE_CACHE_DIR/room)
        polls = PollStore(rooms)
        code, key, _ = rooms.create_room(3, ROOM_QUERY, driver="bench")
        tag, asked = secrets.token_hex(3), iter(range(10**6))

        def questions() -> list[str]:  # new every round and every run: none is served from a store of runs
            r = next(asked)
            return [f"{QUESTIONS[(r * n + i) % len(QUESTIONS)]} ({tag}: round {r}, learner {i})" for i in range(n)]

        asyncio.run(follow_page(url, code, timeout))  # warm: the stage's own run, stored
        asyncio.run(one_round(url, questions(), None, None, timeout))  # warm: the pages' first runs, not measured
        wait_for_quiet_queue(str(ROOT / "artifacts" / LOG_NAME), 5.0, limit_s=120.0)
        sides = {"without": [], "with": []}
        checks = []
        for r in range(rounds):
            for side in (("without", "with") if r % 2 == 0 else ("with", "without")):
                poll = None
                if side == "with":
                    opened = polls.open_poll(code, key, "tokens", f"How many tokens? (round {r})", ROOM_QUERY, 3,
                                             real={"count": 5, "answer": "5", "tokens": []})
                    wanted = {f"learner-{i}": str(100 * r + i) for i in range(n)}
                    poll = (polls, opened.id, wanted)
                learners, answers = asyncio.run(one_round(url, questions(), code, poll, timeout))
                seconds = [x["seconds"] for x in learners if x["seconds"] is not None]
                errors = [f"learner {x['question']!r}: {x['error']}" for x in learners if x["error"]]
                errors += [f"cross-talk {x['question']!r}" for x in learners if x["cross_talk"]]
                errors += [f"follow page: {a['error']}" for a in answers if a["error"]]
                if poll is None and any(a["shown"] for a in answers):
                    errors.append("a follow page showed a poll in a round without one")
                line = (f"round {r + 1} {side:<7}: new question p50 {statistics.median(seconds):5.1f} s, "
                        f"p95 {p95(seconds):5.1f} s; learner errors {len(errors)}")
                if poll is not None:
                    frozen = sorted(polls.reveal(code, key, opened.id).revealed_answers)
                    polls.close(code, key, opened.id)  # the next "without" round's follow pages show no poll
                    check = {"counted": polls.count(code, opened.id), "exact": frozen == sorted(wanted.values()),
                             "shown": sum(a["shown"] for a in answers),
                             "all_in": max((a["at"] for a in answers if a["at"] is not None), default=float("nan"))}
                    checks.append(check)
                    line += (f"; poll: {check['counted']} counted, Reveal froze each learner's answer once: "
                             f"{check['exact']}, shown on {check['shown']} follow pages, all in "
                             f"{check['all_in']:.1f} s after it opened (its pages' errors are the round's)")
                sides[side].append({"seconds": seconds, "errors": errors})
                print(line, flush=True)
    return report(sides, checks, n, load)


def report(sides: dict, checks: list[dict], n: int, load: tuple) -> int:
    print(f"\n{n} learners on one server.py ({MODEL}, the real model, its default {DEFAULT_WEIGHTS} weights), "
          f"{len(sides['without'])} rounds each side; load average at the start {load[0]:.1f}, "
          f"at the end {os.getloadavg()[0]:.1f}")
    p95s = {}
    for side, results in sides.items():
        p50 = [statistics.median(r["seconds"]) for r in results]
        p95s[side] = [p95(r["seconds"]) for r in results]
        print(f"  new question {side:<7} a poll: p50 {spread_of(p50)}, p95 {spread_of(p95s[side])} over the rounds")
    ratio = statistics.median(p95s["with"]) / statistics.median(p95s["without"])
    print(f"  p95 with / without a poll: {ratio:.2f}x (per round pair: "
          f"{', '.join(f'{w / o:.2f}x' for w, o in zip(p95s['with'], p95s['without']))})")
    errors = [e for results in sides.values() for r in results for e in r["errors"]]
    once = all(c["counted"] == n and c["exact"] for c in checks)
    all_in = [c["all_in"] for c in checks]
    print(f"  every answer counted once: {once} ({', '.join(str(c['counted']) for c in checks)} counted of {n}); "
          f"errors: {len(errors)}; all {n} answers in {', '.join(f'{s:.1f}' for s in all_in)} s after the poll "
          f"opened (target 10 s)")
    for e in errors[:5]:
        print("  error:", e)
    ok = once and not errors and all(s <= 10.0 for s in all_in)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1
