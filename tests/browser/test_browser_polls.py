"""A room's poll in a real browser: a presenter and three learner contexts (Debian's chromium through Playwright, the
shared tiny-model server and Chromium of kit.browser_fixtures). The presenter opens a Next token poll, the learners
answer, the projector shows "3 answered" and no answer, a learner's second answer replaces the first, a follow-link
learner cannot open, reveal or close a poll by any way the room test tries, Reveal shows the class's histogram beside
the model's real probabilities, an HTML or 10,000-character answer is cut and shown as text, and the room summary
downloads and opens offline with every chart drawn."""
import hashlib
import json
import os
import re
import secrets
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
from kit.browser import (CHROMIUM, SHOTS, give_back, open_expander, open_offline, settle, tab, until, visit,
                         warm_context)

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]
HOSTILE = "<img src=x onerror=\"window.pwned=1\">" + "x" * 10_000


def body(page) -> str:
    return page.inner_text("body")


def wait_text(page, text: str, timeout_s: float = 60) -> None:
    until(page, "t => document.body.innerText.includes(t)", arg=text, timeout_s=timeout_s)


def answer(page, text: str) -> None:
    page.get_by_label("Your guess: the next token").fill(text)
    page.get_by_role("button", name="Send my answer").click()
    settle(page)


def the_poll(folder: Path, code: str) -> dict:
    pointer = json.loads((folder / f"polls-{code}" / "current.json").read_text())
    return json.loads((folder / f"polls-{code}" / f"poll-{pointer['poll']}.json").read_text())


def test_a_poll_with_a_presenter_and_three_learners(tiny_server, tiny_server_folder, chromium, tmp_path):
    folder = tiny_server_folder / "room"
    presenter = warm_context(chromium, 1600, 1100)
    page = visit(presenter, f"{tiny_server}/presenter?{urlencode({'q': 'Is a tomato a fruit?', 'max_new_tokens': 4})}"
                            "&stage=8")
    page.get_by_role("button", name=re.compile("Start presenting")).click()
    settle(page)
    code = page.evaluate("() => new URLSearchParams(location.search).get('room')")
    assert code, page.url
    open_expander(page, "Ask the room a question")
    page.get_by_role("button", name="Open the poll").click()
    settle(page)
    wait_text(page, "0 answered")
    poll = the_poll(folder, code)
    assert poll["kind"] == "next_token"
    typed = next(c["text"].strip() for c in poll["real"]["top"] if c["text"].strip())  # the model's best typable

    learners = [visit(warm_context(chromium, 1300, 1000),
                      f"{tiny_server}/presenter?follow={code}") for _ in range(3)]
    for learner in learners:
        wait_text(learner, "The presenter asks")
        assert learner.get_by_role("button", name=re.compile("Open the poll|Reveal|Close the poll")).count() == 0
    answer(learners[0], HOSTILE)
    answer(learners[1], typed)
    answer(learners[2], "Zanzibar")
    answer(learners[2], "Quokka")  # the second answer replaces the first
    answers = folder / f"polls-{code}" / f"answers-{poll['id']}"
    assert len(list(answers.glob("*.json"))) == 3  # one file per learner session
    wait_text(page, "3 answered", timeout_s=30)  # the projector's 3-second count
    shown = body(page)
    assert "Quokka" not in shown and "Zanzibar" not in shown and "xxxxx" not in shown  # a count, never the answers
    assert "Quokka" not in body(learners[1])  # a learner sees nobody else's answer before the reveal

    # a learner holding only the follow link tries every way in; the poll stays open and unchanged
    key = hashlib.sha256(f"room:{code}".encode()).hexdigest()[:32]
    tries = [f"{tiny_server}/presenter?follow={code}&pp_open=1&pp_reveal=1&pp_close=1&pp_kind=tokens",
             f"{tiny_server}/presenter?room={code}&stage=3", f"{tiny_server}/presenter?room={code}&key={key}",
             f"{tiny_server}/presenter?room={code}&key={secrets.token_hex(16)}&pp_reveal=1",
             f"{tiny_server}/presenter?follow={code}&room={code}&key={code * 6}"]
    another = tab(learners[1].context)  # in a learner's browser: one more tab, each try a session of its own
    for url in tries:
        another.goto(url)
        settle(another)
        pollers = another.get_by_role("button", name=re.compile("^(Open the poll|Reveal|Close the poll)$"))
        assert pollers.count() == 0, url
    another.close()
    assert the_poll(folder, code)["id"] == poll["id"] and the_poll(folder, code)["revealed_at"] is None
    assert len(list((folder / f"polls-{code}").glob("poll-*.json"))) == 1

    page.get_by_role("button", name="Reveal").click()
    settle(page)
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
    labels = " ".join(page.locator(".js-plotly-plot .xtick text").all_text_contents())
    assert "Quokka" in labels and "Zanzibar" not in labels  # the second answer counted, the first not
    assert "<img src=x" in labels  # the HTML answer as text (its tick cut short; the whole is at most 200 characters)
    revealed = body(page)
    top = poll["real"]["top"][0]
    assert "The model's real answer" in revealed and f"{top['probability']:.1%}" in revealed  # the real probabilities
    legend = " ".join(page.locator(".js-plotly-plot .legendtext").all_text_contents())
    assert "share of the class" in legend and "the model's probability" in legend
    assert page.evaluate("() => window.pwned") is None and page.locator("img[src=x]").count() == 0
    page.screenshot(path=str(SHOTS / "room_poll_revealed.png"))
    wait_text(learners[2], "The model's real answer", timeout_s=30)  # the learners' screens turn to the class view
    assert "Your answer" in body(learners[2]) and "Quokka" in body(learners[2])
    wait_text(learners[0], "The model's real answer", timeout_s=30)
    own = body(learners[0])
    assert "<img src=x" in own and "x" * 150 in own and "x" * 201 not in own  # their answer, as text, cut at 200
    assert learners[0].evaluate("() => window.pwned") is None and learners[0].locator("img[src=x]").count() == 0
    learners[2].screenshot(path=str(SHOTS / "room_poll_learner_class_view.png"))

    open_expander(page, "Room summary")
    page.get_by_role("button", name="Make the room summary").click()
    settle(page)
    button = page.get_by_role("button", name=re.compile("Download the room summary \\(HTML"))
    button.wait_for(state="visible", timeout=60_000)
    with page.expect_download(timeout=120_000) as info:
        button.click()
    path = tmp_path / "summary.html"
    info.value.save_as(path)
    with page.expect_download(timeout=120_000) as info:
        page.get_by_role("button", name=re.compile("Download the room summary \\(CSV")).click()
    csv_text = Path(info.value.path()).read_text(encoding="utf-8")
    assert "Quokka" in csv_text and "questions learners asked" in csv_text
    summary, asked = open_offline(chromium, path, min_plots=1)
    assert asked == [] and summary.evaluate("() => window.pwned") is None
    assert "<img src=x" in summary.inner_text("body")
    summary.screenshot(path=str(SHOTS / "room_poll_summary_offline.png"))
    summary.context.close()
    page.get_by_role("button", name="Close the poll").click()
    settle(page)
    for learner in learners:
        give_back(learner.context)
    give_back(presenter)
    assert parse_qs(urlparse(page.url).query).get("room") in (None, [code])
