"""A workshop room in Chromium with API traffic beside it: while a presenter walks every stage with the keyboard and a
learner follows (the walk of test_browser_room.py), a client of the official openai SDK streams answers from the
same server the whole time (server.py: the pages and the API on one port, one queue). The room's expectations still
hold (every stage drawn without an exception, the learner follows to the last, without the presenter's buttons), and
every answer the client streamed is its own question's greedy answer (the pages' runs and the API's never mix)."""
import os
import threading

import pytest
from kit.browser import CHROMIUM, SHOTS, app_server, give_back, tab, warm_context
from kit.room_walk import start_presenting, visit, walk_every_stage
from kit.sdks import openai

from views.pages.presenter.stages import STAGES

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")]

SMOL = "SmolLM2-135M-Instruct"
CLIENT_QUESTIONS = ["Name a red fruit.", "Count to three.", "Say hello in French."]


@pytest.fixture(scope="module")
def server(tiny_server_cache):
    with app_server("browser-room-api-server.log", cache_dir=tiny_server_cache, script="server.py",
                    env={"TPE_API_KEY": ""}) as url:
        yield url


class StreamingClient(threading.Thread):
    """Streams its questions in turn until told to stop; keeps every error and every answer that is not the
    question's greedy answer as the API gave it whole before the room began."""

    def __init__(self, url: str, expected: dict[str, str]):
        super().__init__(daemon=True)
        self.client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
        self.expected, self.stop = expected, threading.Event()
        self.answers, self.errors, self.mixed = 0, [], []

    def run(self) -> None:
        while not self.stop.is_set():
            question = CLIENT_QUESTIONS[self.answers % len(CLIENT_QUESTIONS)]
            try:
                chunks = self.client.chat.completions.create(
                    model=SMOL, messages=[{"role": "user", "content": question}], max_tokens=12, temperature=0,
                    stream=True)
                text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            except Exception as e:  # kept for the assertion, which names it
                self.errors.append(f"{type(e).__name__}: {e}")
                return
            self.answers += 1
            if text != self.expected[question]:
                self.mixed.append((question, text))


def test_a_presenter_and_a_learner_walk_the_room_while_an_sdk_client_streams(server, chromium):
    whole = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=120)
    expected = {q: whole.chat.completions.create(model=SMOL, messages=[{"role": "user", "content": q}], max_tokens=12,
                                                 temperature=0).choices[0].message.content for q in CLIENT_QUESTIONS}
    client = StreamingClient(server, expected)
    client.start()
    context = warm_context(chromium, 1600, 1000)
    learner_context = warm_context(chromium, 1300, 1000)
    try:
        page = visit(context, f"{server}/presenter?q=Why+do+owls+hoot%3F&max_new_tokens=4")
        assert page.locator("h1").first.inner_text().startswith("1.")
        follow = start_presenting(page)
        learner = tab(learner_context)
        learner.goto(follow)
        walk_every_stage(page, learner)
        assert learner.locator('[data-testid="stException"]').count() == 0
        learner.screenshot(path=str(SHOTS / f"room_learner_beside_api_{len(STAGES)}.png"))
    finally:
        client.stop.set()
        client.join(timeout=120)
        give_back(learner_context)
        give_back(context)
    assert not client.errors, client.errors
    assert not client.mixed, client.mixed
    assert client.answers >= len(CLIENT_QUESTIONS), "the client streamed too few answers to be beside the room"
