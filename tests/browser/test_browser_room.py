"""A workshop room in a real browser: links that reproduce a view and presenter mode (Debian's chromium through
Playwright; the downloads and the offline report: test_browser_downloads.py). The server runs the
tiny random-weight model (conftest's `tiny_server_cache`), except for the Korean presenter walk, which checks the
real model's first answer token (part of a Korean character) and then that every page naming tokens shows the Korean
question's tokens as characters."""
import json
import os
import re
from urllib.parse import parse_qs, quote, urlencode, urlparse

import pytest
from kit.browser import (CHROMIUM, SHOTS, SIDEBAR_LINK, app_server, give_back, open_expander, question_shown,
                         settle, share_link, tab, until, warm_context)
from kit.room_walk import next_stage, start_presenting, visit, wait_for_stage, walk_every_stage

from views.chrome.page_list import page_at
from views.pages.presenter.stages import STAGES, stage_number

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]


ROOM_BOUND = 30  # the room store's bound in files on this module's tiny server (5,000 by default), so a flood of a
# few dozen visits passes it


@pytest.fixture(scope="module")
def server(tiny_server_cache):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TPE_ROOM_MAX_FILES", str(ROOM_BOUND))
        with app_server("browser-room-server.log", cache_dir=tiny_server_cache) as url:
            yield url


@pytest.fixture(scope="module")
def real_server(real_server_cache):
    """A server on the real model, started only for the walk that needs what the real weights answer (its rooms in a
    store of its own: kit.app_fixtures' real_server_cache)."""
    with app_server("browser-room-real-server.log", cache_dir=real_server_cache) as url:
        yield url


@pytest.fixture(scope="module")
def browser(server, chromium):
    """The module's Chromium (kit.browser_fixtures), once its server is up."""
    return chromium


def chart_titles(page) -> str:
    """The titles drawn inside the plotly charts (SVG text, not part of the page's innerText), once a chart has
    drawn one: a finished script run's charts can still be mounting in a busy browser (settle() saw none yet)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_selector(".js-plotly-plot .gtitle", timeout=30_000)
    except PlaywrightTimeout:  # a page without charts: the assertion that follows says what was missing
        pass
    return " | ".join(page.locator(".js-plotly-plot .gtitle").all_text_contents())


def test_a_copied_link_reproduces_the_view_in_another_browser(server, browser):
    question = "Why is the sky blue?"
    first = warm_context(browser, 1300, 1200)
    page = visit(first, f"{server}/attention?q={quote(question)}&max_new_tokens=8&layer=3&head=2")
    assert "layer 3, head 2" in chart_titles(page)
    link = share_link(page, "attention")
    params = parse_qs(urlparse(link).query)
    assert params["q"] == [question] and params["at.layer"] == ["3"] and params["at.head"] == ["2"]
    page.screenshot(path=str(SHOTS / "room_link_source.png"))
    second = warm_context(browser, 1300, 1200)  # a fresh browser: no shared state
    again = visit(second, link)
    assert "layer 3, head 2" in chart_titles(again)
    assert question_shown(again) == question
    again.screenshot(path=str(SHOTS / "room_link_reopened.png"))
    give_back(first)
    give_back(second)


def test_tampered_links_fall_back_with_a_note(server, browser):
    context = warm_context(browser)
    page = visit(context, f"{server}/attention?layer=abc&head=99&temperature=hot&q=%3Cb%3Ehi%3C/b%3E")
    body = page.inner_text("body")
    assert page.locator('[data-testid="stException"]').count() == 0
    assert "The link's layer was not usable" in body and "The link's temperature was not usable" in body
    assert page.locator("b", has_text="hi").count() == 0  # the question is text, not markup
    give_back(context)


def slider(page, label: str):
    main = page.locator('[data-testid="stMain"]')
    return main.locator('[data-testid="stSlider"]', has_text=label).locator('input[type="range"]').first


def test_links_keep_and_follow_every_control(server, browser):
    """A link's sampler settings open as given; moving a control inside a fragment rewrites the address
    bar and the share box at once; the colour scale travels; a new question leaves nothing stale."""
    context = warm_context(browser, 1300, 1200)
    page = visit(context, f"{server}/next-token?t=1&top_p=0.5&seed=7")
    assert slider(page, "temperature").get_attribute("aria-valuetext") == "1.00"
    assert slider(page, "top-p").get_attribute("aria-valuetext") == "0.50"
    query = parse_qs(urlparse(page.url).query)
    assert query["nt.temperature"] == ["1"] and query["top_p"] == ["0.5"] and query["seed"] == ["7"], page.url
    page.goto(f"{server}/next-token?t=0.01")  # finer than the old 0.05 steps
    settle(page)
    assert slider(page, "temperature").get_attribute("aria-valuetext") == "0.01"
    slider(page, "temperature").focus()
    page.keyboard.press("ArrowRight")  # the sampler is a fragment: only it reruns
    settle(page)
    assert parse_qs(urlparse(page.url).query)["nt.temperature"] == ["0.02"], page.url
    assert parse_qs(urlparse(share_link(page, "next-token")).query)["nt.temperature"] == ["0.02"]

    page.goto(f"{server}/attention?layer=3&head=2&scale=log")
    settle(page)
    assert page.locator('[data-testid="stMain"] [role="radiogroup"] input[type="radio"]').nth(2).is_checked()
    assert "The page opened on" not in page.inner_text("body")
    sidebar = page.locator('[data-testid="stSidebar"]')
    sidebar.locator("textarea").first.fill("Why is the sky blue?")
    sidebar.get_by_role("button", name="Run the model").click()
    settle(page)
    assert slider(page, "layer").get_attribute("aria-valuetext") == "0"  # a new question: the page's own default
    slider(page, "layer").focus()
    page.keyboard.press("ArrowRight")  # layer 1, inside the one-head fragment
    settle(page)
    assert "layer 1, head" in chart_titles(page)
    for link in (page.url, share_link(page, "attention")):
        query = parse_qs(urlparse(link).query)
        assert query["at.layer"] == ["1"] and query["at.scale"] == ["log"] and query["q"] == ["Why is the sky blue?"], \
            link
    assert "Pick at least two tokens." not in page.inner_text("body")  # attention by hand kept four tokens
    page.screenshot(path=str(SHOTS / "room_links_attention.png"))
    give_back(context)


WALKS = {  # a question whose first answer token is part of a Korean character, and a ~600-token one
    "korean": {"q": "토마토는 과일이야?", "system": "항상 한국어로만 대답하세요.", "max_new_tokens": "8"},
    "long": {"q": "Tell me everything about tomatoes, please. " * 68, "max_new_tokens": "4"},
}
# The last stage each walk reaches. The Korean walk stops at the last screen that shows the request's own tokens:
# the prompt-caching screen after it plays a fixed English conversation, whatever the request, which on the real
# model is the walk's biggest job (~7 s of CPU, 25-35 s of a loaded machine's time). That screen is walked in a
# browser by the long walk and drawn on the real model by the presenter's AppTests
# (tests/pages/presenter/test_presenter_polls.py).
LAST_STAGE = {"korean": stage_number("The end token and clean-up"), "long": len(STAGES)}


@pytest.mark.parametrize("walk", list(WALKS))
def test_presenter_walks_all_stages_with_the_keyboard_and_a_learner_follows(request, browser, walk):
    server = request.getfixturevalue("real_server" if walk == "korean" else "server")
    context = warm_context(browser, 1600, 1000)
    page = visit(context, f"{server}/presenter?{urlencode(WALKS[walk])}")
    assert page.locator("h1").first.inner_text().startswith("1.")
    assert page.locator('[data-testid="stSidebar"]').is_hidden()
    assert page.locator('[data-testid="stException"]').count() == 0
    start_presenting(page)
    # a finished run's code blocks can still be mounting (lazy-loaded): wait for the two links themselves
    page.locator('[data-testid="stMain"] code', has_text="/journey").first.wait_for(timeout=60_000)
    page.locator('[data-testid="stMain"] img').first.wait_for(timeout=60_000)
    links = page.locator('[data-testid="stMain"] code').all_inner_texts()
    follow = next(x for x in links if "/presenter?follow=" in x)
    journey = next(x for x in links if "/journey" in x)
    assert page.locator('[data-testid="stMain"] img').count() == 1  # the QR code
    assert "only listens on this computer" in page.inner_text("body")  # this test server binds to localhost
    if walk == "long":
        assert "link=" in journey and len(journey) < 100  # a short link the server resolves
    learner = tab(warm_context(browser, 1300, 1000))
    learner.goto(follow)
    # The follow page's first run takes the presenter's request and reruns (url_state.switch_request): settle()
    # waits for the run after it, the one that completes.

    def at_each(n: int) -> None:
        if n == stage_number("Logits: a score for every token"):
            ticks = page.locator(".js-plotly-plot .ytick text").first.get_attribute("style")
            assert "font-size: 20px" in ticks, ticks  # projector-sized, not Streamlit's 12 px
        if n == stage_number("Sampling") and walk == "korean":
            assert "Chosen: 토 (1/3)" in page.inner_text("body")  # named by its character, as Journey does
        if n == stage_number("The end token and clean-up"):
            event = page.locator('[data-testid="stMain"] [data-testid="stCode"]').first.bounding_box()
            assert event["height"] < 600, event  # the token ids on one line, not one per line

    last = LAST_STAGE[walk]
    walk_every_stage(page, learner, at_each, last=last)
    page.screenshot(path=str(SHOTS / f"room_presenter_{walk}_{last}.png"))
    assert learner.locator('[data-testid="stException"]').count() == 0
    learner.screenshot(path=str(SHOTS / f"room_learner_{walk}_{last}.png"))
    page.keyboard.press("ArrowLeft")
    wait_for_stage(page, last - 1, timeout_s=60)
    settle(page)  # the link is rewritten once the screen has run
    assert f"stage={last - 1}" in page.url
    opened = tab(context)  # the Journey link (short for the long question) opens the same request
    opened.goto(journey)
    settle(opened)
    assert opened.locator("h1").first.inner_text().strip() == "Journey"  # a bookmarked page opens that page
    assert "Page not found" not in opened.inner_text("body")
    assert question_shown(opened) == WALKS[walk]["q"]
    if walk == "korean":
        reads_as_korean(opened, "journey")
        for path in KOREAN_PAGES:  # through the sidebar, as a learner goes on: the session keeps the request
            opened.locator(SIDEBAR_LINK, has_text=page_at(path).title).first.click()
            settle(opened)
            assert urlparse(opened.url).path == f"/{path}", opened.url
            reads_as_korean(opened, path)
    give_back(learner.context)
    give_back(context)


# The pages that name prompt tokens (chips, axes, tables, titles) besides Journey; every other page is opened with a
# Korean question by AppTests in test_any_script_pages.py. Next token names the answer's tokens, which the real model
# gives in Korean. They show the Korean walk's request, whose runs the walk has made.
KOREAN_PAGES = ("request", "tokens", "attention", "next-token")


def reads_as_korean(page, path: str) -> None:
    """The page names a Korean token by its character (토), not only by its bytes (<0xED>)."""
    assert page.locator('[data-testid="stException"]').count() == 0, path
    try:  # a page drawn before the run is ready (a server still loading the network) fills in later
        until(page, "() => document.body.innerText.includes('토') || [...document.querySelectorAll("
              "'.js-plotly-plot')].some(p => p.textContent.includes('토'))", timeout_s=120)
    except Exception:  # the assert below names the page; its screenshot shows what it held
        page.screenshot(path=str(SHOTS / f"room_korean_{path}_failed.png"), full_page=True)
    text = page.inner_text("body") + " ".join(page.locator(".js-plotly-plot").all_text_contents())
    assert "토" in text, f"{path}: no Korean character on the page"
    page.screenshot(path=str(SHOTS / f"room_korean_{path}.png"))


def test_a_learner_holding_the_follow_link_cannot_drive_the_room(server, browser, tiny_server_cache):
    """A second browser holding only the follow link tries every way in: keys on the follow page, the code as the
    presenter's room with a stage and a question, made-up and derived keys, stop following and present. The room's
    file stays as the presenter left it; the presenter key is in neither the presenter's address bar nor the
    projected text; its private link (opened elsewhere) does move the room, and the presenter's screen says so."""
    import hashlib
    import secrets

    presenter = warm_context(browser, 1600, 1000)
    page = visit(presenter, f"{server}/presenter?q=Why+is+the+sky+blue%3F&max_new_tokens=4")
    follow = start_presenting(page)
    code = parse_qs(urlparse(follow).query)["follow"][0]
    page.keyboard.press("ArrowRight")
    wait_for_stage(page, 2, timeout_s=120)
    settle(page)
    room_file = tiny_server_cache / "room" / f"room-{code}.json"
    left = json.loads(room_file.read_text())
    assert left["stage"] == 2 and left["query"]["q"] == "Why is the sky blue?"
    assert "key=" not in page.url and f"room={code}" in page.url

    learner = warm_context(browser, 1300, 1000)
    tries = [f"{follow}&stage=9&q=hijacked", f"{server}/presenter?room={code}&stage=9&q=hijacked",
             f"{server}/presenter?room={code}&key={secrets.token_hex(16)}&stage=9&q=hijacked",
             f"{server}/presenter?room={code}&key={hashlib.sha256(f'room:{code}'.encode()).hexdigest()[:32]}",
             f"{server}/presenter?follow={code}&room={code}&key={code * 6}&stage=9"]
    learn = tab(learner)  # one tab for every try: each address opens a session of its own anyway, and a
    # page opened in a tab that already ran one costs Chromium's renderer about half a new tab's CPU (bench/RESULTS.md)
    for n, url in enumerate(tries):
        learn.goto(url)
        learn.wait_for_selector("h1", timeout=300_000)
        settle(learn)
        for key in ("ArrowRight", "ArrowRight", "ArrowLeft"):
            drives = learn.get_by_role("button", name=re.compile("Next")).count() > 0  # its own room's buttons
            learn.keyboard.press(key)
            if drives:  # a follower's page has no shortcut: the key runs nothing there
                settle(learn)
        stop = learn.get_by_role("button", name="Stop following")
        if stop.count():
            stop.click()
            learn.get_by_role("button", name=re.compile("Next")).wait_for(timeout=300_000)  # a room of its own
            settle(learn)
            learn.keyboard.press("ArrowRight")
            settle(learn)
        assert learn.locator('[data-testid="stException"]').count() == 0, url
        now = json.loads(room_file.read_text())
        assert (now["stage"], now["query"], now["driver"]) == (left["stage"], left["query"], left["driver"]), url
        learn.screenshot(path=str(SHOTS / f"room_takeover_try_{n}.png"))
    learn.close()
    assert "someone else" not in page.inner_text("body")

    page.keyboard.press("ArrowLeft")  # back to stage 1, where the links are
    wait_for_stage(page, 1, timeout_s=120)
    settle(page)
    body = page.inner_text("body")
    open_expander(page, "Your presenter link")
    private = page.locator('[data-testid="stMain"] code').filter(has_text="key=").first.inner_text().strip()
    key = parse_qs(urlparse(private).query)["key"][0]
    assert key not in body and key not in page.url  # not on the projected screen until the presenter opens it
    page.locator("summary", has_text="Your presenter link").first.click()  # closed again
    private_tab = tab(learner)  # the presenter's private link, opened in another browser (the learner's)
    private_tab.goto(private.replace("stage=1", "stage=5"))  # the same request, another stage
    wait_for_stage(private_tab, 5, timeout_s=300)
    settle(private_tab)
    assert "key=" not in private_tab.url  # the key leaves the address bar once the page has run
    assert json.loads(room_file.read_text())["stage"] == 5
    until(page, "() => document.body.innerText.includes('someone else')", timeout_s=60)
    assert "moved your learners to stage 5." in page.inner_text("body")  # the same request: only the stage moved
    page.screenshot(path=str(SHOTS / "room_presenter_told_of_another_driver.png"))
    give_back(learner)
    give_back(presenter)


def test_the_presenter_reloads_and_opens_a_second_tab_and_still_drives_the_room(server, browser):
    """A reload used to give the presenter's own screen `?room=CODE` without the key: a follower with no Previous or
    Next. The browser keeps the key in a cookie for that room (views/pages/presenter/room_key.py); the key is in
    neither the address nor the page's text, and a learner's browser given the same address only follows."""
    presenter = warm_context(browser, 1600, 1000)
    page = visit(presenter, f"{server}/presenter?q=Why+is+the+sky+blue%3F&max_new_tokens=4")
    code = parse_qs(urlparse(start_presenting(page)).query)["follow"][0]
    open_expander(page, "Your presenter link")
    private = page.locator('[data-testid="stMain"] code').filter(has_text="key=").first.inner_text().strip()
    key = parse_qs(urlparse(private).query)["key"][0]
    page.locator("summary", has_text="Your presenter link").first.click()  # closed again
    # what a reload needs: the browser holds the key
    until(page, "code => document.cookie.includes('tpe_presenter_' + code + '=')", arg=code, timeout_s=30)
    learner = tab(warm_context(browser, 1300, 1000))
    learner.goto(f"{server}/presenter?follow={code}")
    wait_for_stage(learner, 1, timeout_s=300)
    settle(learner)

    next_stage(page, 2)
    page.reload()  # F5 on the projector's laptop
    settle(page)
    assert page.get_by_role("button", name="Stop following").count() == 0
    next_stage(page, 3)
    wait_for_stage(learner, 3, timeout_s=60)

    second_tab = tab(presenter)  # a second tab of the same browser, on the address the first one shows
    second_tab.goto(page.url)
    wait_for_stage(second_tab, 3, timeout_s=300)
    settle(second_tab)
    next_stage(second_tab, 4)
    wait_for_stage(learner, 4, timeout_s=60)
    for shown in (page, second_tab):
        assert shown.get_by_role("button", name="Stop following").count() == 0
        assert key not in shown.url and key not in shown.inner_text("body")
    bare = tab(presenter)  # the bare address in that browser offers to go on with the room
    bare.goto(f"{server}/presenter")
    settle(bare)
    bare.get_by_role("button", name=f"Go on presenting room {code}").click()
    wait_for_stage(bare, 4, timeout_s=300)  # where the room is, with its request, not the bare page's default
    settle(bare)
    assert parse_qs(urlparse(bare.url).query)["q"] == ["Why is the sky blue?"], bare.url
    next_stage(bare, 5)
    wait_for_stage(learner, 5, timeout_s=60)
    # the same address in a browser without the key (the learner's, which holds none): follows
    stranger = tab(learner.context)
    stranger.goto(second_tab.url)
    wait_for_stage(stranger, 5, timeout_s=300)
    settle(stranger)
    assert stranger.get_by_role("button", name=re.compile("Next")).count() == 0
    second_tab.screenshot(path=str(SHOTS / "room_presenter_second_tab.png"))
    for context in (learner.context, presenter):
        give_back(context)


async def _visit_presenter(url: str, n: int, at_once: int = 4) -> list[str]:
    """`n` visits to /presenter over Streamlit's websocket (each a fresh session: no browser, as a script would
    flood), `at_once` at a time; returns each visit's error, if any."""
    import asyncio

    import websockets
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    stream = url.replace("http", "ws", 1) + "/_stcore/stream"
    gate, errors = asyncio.Semaphore(at_once), []

    async def one() -> None:
        async with gate:
            try:
                async with websockets.connect(stream, subprotocols=["streamlit"], max_size=None) as ws:
                    back = BackMsg()
                    back.rerun_script.page_name = "presenter"
                    await ws.send(back.SerializeToString())
                    while True:
                        msg = ForwardMsg()
                        msg.ParseFromString(await asyncio.wait_for(ws.recv(), 120))
                        if msg.WhichOneof("type") == "script_finished":
                            return
            except Exception as e:  # noqa: BLE001 - reported by the test
                errors.append(f"{type(e).__name__}: {e}")

    await asyncio.gather(*(one() for _ in range(n)))
    return errors


def test_a_flood_of_presenter_visits_leaves_the_live_room_and_a_removed_room_tells_its_followers(
        server, browser, tiny_server_cache):
    """5,100 visits to /presenter over the websocket used to make 5,100 room files and push a live room out of the
    store (5,000 files), its followers left 'Waiting for the presenter' for ever. Here the bound is ROOM_BOUND."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    presenter = warm_context(browser, 1600, 1000)
    page = visit(presenter, f"{server}/presenter?q=Is+a+tomato+a+fruit%3F&max_new_tokens=4")
    code = parse_qs(urlparse(start_presenting(page)).query)["follow"][0]
    learner = tab(warm_context(browser, 1300, 1000))
    learner.goto(f"{server}/presenter?follow={code}")
    wait_for_stage(learner, 1, timeout_s=300)
    settle(learner)
    folder = tiny_server_cache / "room"
    rooms = set(folder.glob("room-*.json"))
    with ThreadPoolExecutor(1) as apart:  # Playwright's sync API holds this thread's event loop
        errors = apart.submit(asyncio.run, _visit_presenter(server, ROOM_BOUND + 10)).result()
    assert errors == []
    assert set(folder.glob("room-*.json")) == rooms  # a visit makes no room
    assert (folder / f"room-{code}.json").exists()
    next_stage(page, 2)
    wait_for_stage(learner, 2, timeout_s=60)  # the room still turns its learners' pages

    (folder / f"room-{code}.json").unlink()  # what the bound does to a room nobody has seen for hours
    until(learner, "code => document.body.innerText.includes('Room ' + code + ' has ended')", arg=code, timeout_s=60)
    assert "Waiting for the presenter" not in learner.inner_text("body")
    learner.screenshot(path=str(SHOTS / "room_follower_told_the_room_ended.png"))
    give_back(learner.context)
    give_back(presenter)
