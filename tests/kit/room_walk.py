"""A workshop room driven in a real browser: a page visited and settled, the presenter's Start presenting and Next,
waiting for a stage (tests/browser/test_browser_room.py and the room beside API traffic use them)."""
import re

from kit.browser import settle, until, visit  # noqa: F401  (visit: the room tests' way in)
from views.pages.presenter.stages import STAGES


def start_presenting(page) -> str:
    """Press Start presenting (a visit makes no room) and return the learners' follow link once it is drawn. A room
    the server refuses (views/pages/presenter/room.py's "No new room now") fails here, naming why."""
    page.get_by_role("button", name=re.compile("Start presenting")).click()
    settle(page)
    follow = page.locator('[data-testid="stMain"] code', has_text="follow=").first
    refused = page.locator('[data-testid="stAlert"]', has_text="No new room now").first
    follow.or_(refused).first.wait_for(timeout=60_000)  # a finished run's code blocks may still be mounting (lazy)
    assert not refused.is_visible(), f"the server made no room: {refused.text_content()}"
    return follow.inner_text().strip()


def next_stage(page, n: int) -> None:
    """Press the presenter's Next button (a page that only follows has none) and wait for stage `n`."""
    page.get_by_role("button", name="Next").click()
    wait_for_stage(page, n, timeout_s=120)
    settle(page)


def wait_for_stage(page, n: int, timeout_s: float) -> None:
    """Wait until the presenter page's title is stage `n`'s ('3. Tokens ...')."""
    until(page, "n => document.querySelector('h1') && "
          "document.querySelector('h1').innerText.startsWith(n + '.')", arg=n, timeout_s=timeout_s)


def walk_every_stage(page, learner, at_each=lambda n: None, last: int = len(STAGES)) -> None:
    """The learner (on the follow link) reaches stage 1; the presenter presses → to each stage up to `last`, no
    stage raising (at_each(n): the caller's checks there); the learner follows to the last one."""
    wait_for_stage(learner, 1, timeout_s=300)  # its first run takes the presenter's request, then reruns
    settle(learner)
    assert learner.get_by_role("button", name=re.compile("Next")).count() == 0
    for n in range(2, last + 1):
        page.keyboard.press("ArrowRight")
        wait_for_stage(page, n, timeout_s=120)
        settle(page)
        assert page.locator('[data-testid="stException"]').count() == 0, f"stage {n}"
        at_each(n)
    wait_for_stage(learner, last, timeout_s=60)  # the learner's page checks the presenter's stage every few s
    settle(learner)
