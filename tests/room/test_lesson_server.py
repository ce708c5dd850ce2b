"""`./run.sh app --lesson FILE` as run.sh starts it (server.py, TPE_LESSON) on the tiny models: before anyone opens a
page, every stage's run is queued at start and written to the room's store of runs (cache/runs), its progress
printed on the terminal, stage by stage, then the total; a presenter's browser then finds the lesson's stage 1."""
import re
import os
import time

import pytest
from kit.browser import CHROMIUM, ROOT, app_server, fresh_page, settle

pytestmark = [pytest.mark.browser]

LESSON = """title = "Server lesson"

[[stages]]
title = "Tokens"
page = "tokens"
[stages.request]
q = "Is a peanut a nut?"
max_new_tokens = 2

[[stages]]
title = "Next token"
page = "next-token"
[stages.request]
q = "Is a peanut a nut?"
max_new_tokens = 2
temperature = 0.9
seed = 5
"""


def wait_for_line(log, text: str, timeout_s: float = 240) -> str:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        seen = log.read_text(encoding="utf-8", errors="replace")
        if text in seen:
            return seen
        time.sleep(0.5)
    raise AssertionError(f"no {text!r} in the server's log in {timeout_s} s:\n{seen[-3000:]}")


def test_the_lessons_runs_are_stored_at_start_with_progress_on_the_terminal(tiny_server_cache, tmp_path, request):
    path = tmp_path / "server-lesson.toml"
    path.write_text(LESSON, encoding="utf-8")
    with app_server("lesson-server.log", cache_dir=tiny_server_cache, script="server.py",
                    env={"TPE_LESSON": str(path)}) as url:
        log = wait_for_line(ROOT / "artifacts" / "lesson-server.log", "2 of 2 stages' runs ready")
        assert "preparing the runs of its 2 stages" in log
        assert "stage 1/2 'Tokens': ready" in log and "stage 2/2 'Next token': ready" in log
        runs = list((tiny_server_cache / "runs").rglob("*.run.pkl"))  # pipeline/server/store/disk.py's files
        assert len(runs) == 2, runs  # both stages' runs, written before any page was opened
        if not os.path.exists(CHROMIUM):
            return
        with fresh_page(request.getfixturevalue("chromium")) as page:
            page.goto(f"{url}/presenter")
            settle(page)
            page.get_by_role("button", name=re.compile("Start presenting")).click()  # the panel is the presenter's
            settle(page)
            body = page.locator("body").inner_text()
            assert "Server lesson" in body and "stage 1 of 2" in body and "Lesson runs prepared: 2 of 2" in body
