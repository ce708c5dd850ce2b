"""Past one process: `./run.sh room 2` puts two app replicas behind HAProxy (sticky sessions,
WebSockets, health checks) sharing the on-disk store of runs. A killed replica's learners come back
on the other one with their request intact; everyone else sees no error. The replicas run the tiny random-weight
model (conftest's `tiny_server_cache`, their shared TPE_CACHE_DIR): what is checked is routing, not answers."""
import os
import re
import shutil
import socket
import subprocess
import time
from urllib.parse import quote

import pytest
from kit.browser import CHROMIUM, ROOT, open_page, question_shown, until, watch

from pipeline.server.health import wait_healthy

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]
# Three learners, one browser context each (a context of its own is a cookie jar of its own: the balancer's sticky
# cookie): round robin puts the first and the third on one replica, the second on the other. The first learner's
# replica is killed, so two learners of one replica come back on the other one and one learner sees nothing.
QUESTIONS = ["Why is the sky blue?", "What is a prime number?", "How do bees make honey?"]


def _free_port_block() -> int:
    """A port P with P, P+101 and P+102 free (the balancer and two replicas)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 102 < 65535 and all(_free(port + d) for d in (101, 102)):
            return port
    pytest.skip("no free port block")


def _free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _pid_on(port: int) -> int | None:
    out = subprocess.run(["bash", "-c", f"ss -ltnp 'sport = :{port}' | grep -o 'pid=[0-9]*' | head -1"],
                         capture_output=True, text=True).stdout.strip()
    return int(out[4:]) if out else None


def _wait_healthy(url: str, timeout: float = 300) -> None:
    if not wait_healthy(url, timeout):
        pytest.fail(f"{url} never became healthy")


ROOM_LOG = ROOT / "artifacts" / "room.log"


def _wait_balancer_sees_both(log_path, timeout: float) -> None:
    """A replica that was still starting when HAProxy began is marked DOWN by its first checks and needs
    `rise 2` good ones to come back: until then every learner lands on the other replica."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        if all(text.rfind(f"replica{i} is DOWN") < text.rfind(f"replica{i} is UP") or f"replica{i} is DOWN" not in text
               for i in (1, 2)):
            return
        time.sleep(0.5)  # polling HAProxy's log for a state, bounded by the deadline
    pytest.fail("HAProxy did not see both replicas up")


@pytest.fixture(scope="module")
def room_env(tiny_server_cache):
    """The replicas' environment: the tiny model, and a warm-up of the default request only (no prompt-caching
    scenario played in the background: no page of this test opens one)."""
    return {**os.environ, "TPE_CACHE_DIR": str(tiny_server_cache), "TPE_WARM_UP": "request"}


@pytest.fixture(scope="module")
def room(room_env):
    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed (./run.sh room installs it)")
    port = _free_port_block()
    log = open(ROOM_LOG, "w") if (ROOT / "artifacts").mkdir(exist_ok=True) is None else None
    proc = subprocess.Popen(["bash", "run.sh", "room", "2", str(port)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, env=room_env)
    url = f"http://127.0.0.1:{port}"
    for replica in (1, 2):
        _wait_healthy(f"http://127.0.0.1:{port + 100 + replica}")
    _wait_healthy(url, 60)
    _wait_balancer_sees_both(ROOM_LOG, 60)
    yield url, port
    os.killpg(proc.pid, 15)
    proc.wait(timeout=30)
    log.close()


def _done(page, question: str, timeout_s: float = 600) -> None:
    # the body's whole text read 4 times a second, not every 100 ms
    until(page, "q => document.body.innerText.includes('This run took') && "
          "document.body.innerText.includes(q)", arg=question, timeout_s=timeout_s, every_ms=250)


def _first_run_done(page, question: str, timeout_s: float = 300) -> None:
    """The learner's first page, to its end. Once (under two test workers) one of four first pages never sent its
    request and the test waited out 600 s: what such a page shows is kept (artifacts/room-stuck-page-*.png and
    .txt) and the test fails, naming it."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        _done(page, question, timeout_s)
    except PlaywrightTimeout:
        stem = ROOT / "artifacts" / f"room-stuck-page-{abs(hash(question)) % 10_000}"
        page.screenshot(path=str(stem.with_suffix(".png")))
        shown = page.evaluate("() => document.body.innerText")
        stem.with_suffix(".txt").write_text(f"{page.url}\n\n{shown}")
        pytest.fail(f"the first page for {question!r} had not finished after {timeout_s:.0f} s; it showed: "
                    f"{shown[-300:]!r} (kept in {stem}.*)")


def _replica(context) -> str:
    return next(c["value"] for c in context.cookies() if c["name"] == "TPE_REPLICA")


def test_sessions_stick_and_survive_a_killed_replica(room, room_env):
    from playwright.sync_api import sync_playwright

    url, port = room
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        contexts, pages = [], []
        for q in QUESTIONS:
            context = browser.new_context()
            page = watch(context.new_page())
            page.goto(f"{url}/journey?q={quote(q)}&max_new_tokens=4")
            contexts.append(context)
            pages.append(page)
        for q, page in zip(QUESTIONS, pages):
            _first_run_done(page, q)
        replicas = [_replica(c) for c in contexts]
        assert set(replicas) == {"r1", "r2"}  # round robin spread the room over both replicas
        # sticky: further clicks stay on the same replica. Each page clicks until the page shows (open_page): in CI
        # (2026-12-03) one of four pages, its first run just done, showed no Tokens page 300 s after one click.
        # Request & template: a page of the same request that loads nothing more (Tokens loads the other model's
        # tokenizer too, ~2 s of each replica's CPU that this test never looks at)
        for n, (page, context, before) in enumerate(zip(pages, contexts, replicas)):
            open_page(page, "Request & template", timeout_s=300, shot=ROOT / "artifacts" / f"room-click-{n}.png")
            assert _replica(context) == before

        victim = replicas[0]
        victim_port = port + 100 + int(victim[1:])
        log_at_kill = len(ROOM_LOG.read_text())
        os.kill(_pid_on(victim_port), 9)
        lost = [i for i, r in enumerate(replicas) if r == victim]
        kept = [i for i, r in enumerate(replicas) if r != victim]
        for i in lost:  # reconnects through the balancer to the other replica; the link and the store bring it back
            page = pages[i]
            deadline = time.time() + 300
            while time.time() < deadline and _replica(contexts[i]) == victim:
                page.wait_for_timeout(200)  # polling the page's cookie, bounded by the deadline
            assert _replica(contexts[i]) != victim
            open_page(page, "Journey", timeout_s=300)
            _done(page, QUESTIONS[i], 300)
            assert question_shown(page) == QUESTIONS[i]
        for i in kept:  # the rest of the room saw nothing
            assert pages[i].locator('[data-testid="stException"]').count() == 0
            assert _replica(contexts[i]) != victim
            assert QUESTIONS[i] in question_shown(pages[i])
        browser.close()

    # HAProxy logs a DOWN for the killed replica, after the kill: its start-up DOWN (checked before it listened)
    # does not count, and a replica up at its first check logs no UP at all (seen 2026-12-04). Two failed checks
    # 2 s apart: on a fast machine the lost learners were back on the other replica before the second one.
    down, deadline = f"replica{victim[1:]} is DOWN", time.time() + 60
    while time.time() < deadline and down not in ROOM_LOG.read_text()[log_at_kill:]:
        time.sleep(0.2)  # polling HAProxy's log, bounded by the deadline
    log = ROOM_LOG.read_text()
    assert down in log[log_at_kill:], "the health check did not take the dead replica out"
    restarted = subprocess.Popen([str(ROOT / ".venv" / "bin" / "streamlit"), "run", "app.py", "--server.port",
                                  str(victim_port), "--server.address", "127.0.0.1"], cwd=ROOT,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=room_env)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and not re.search(rf"replica{victim[1:]} is UP.*\n(?!.*DOWN)",
                                                        ROOM_LOG.read_text()[len(log):]):
            time.sleep(0.2)  # polling HAProxy's log, bounded by the deadline
        assert re.search(rf"replica{victim[1:]} is UP", ROOM_LOG.read_text()[len(log):])
    finally:
        restarted.terminate()
