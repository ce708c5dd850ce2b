"""A lesson's runs prepared at start (views/server/lesson_runs.py) on the tiny models: every stage's run goes
through the run queue into the store of runs, under the key the page computes when the stage's link is opened, so
the room finds it there; progress is printed on the terminal."""
from __future__ import annotations

import os

import pytest
from kit.paths import ROOT
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.usefixtures("tiny_app", "lessons_reported")

LESSON = """title = "A short lesson"

[[stages]]
title = "Tokens"
page = "tokens"
[stages.request]
q = "Is a peanut a nut?"
max_new_tokens = 3
temperature = 0.8
seed = 11

[[stages]]
title = "Prompt caching"
page = "prompt-caching"
[stages.request]
max_new_tokens = 2
[stages.controls]
"pc.scenario" = "conversation"
"pc.block_size" = 8
"""


def test_every_stage_is_run_through_the_queue_and_stored(tmp_path, capfd):
    from views.server.lesson_runs import start_lesson_runs
    from views.server.scenarios import scenario_key
    from views.server.state import default_model_key, result_store, run_store, using_model
    from views.server.waiting import model_result_key

    path = tmp_path / "short.toml"
    path.write_text(LESSON, encoding="utf-8")
    runs = start_lesson_runs(str(path))
    assert runs.problem is None and [s.number for s in runs.stages] == [1, 2]
    for stage in runs.stages:
        for ticket in stage.tickets():
            ticket.result(timeout=300)
        assert stage.done() and stage.error() is None
        assert run_store().peek(stage.key) is not None  # the page's run, found without the model
    with using_model(default_model_key(), "fp32"):  # the scenario as the page reads it: the picked model's
        assert result_store().peek(model_result_key(scenario_key("conversation", 8))) is not None
    assert runs.finished() and runs.ready() == 2
    out = _wait_for_report(capfd, "A short lesson")
    assert "stage 1/2 'Tokens': ready" in out and "stage 2/2 'Prompt caching': ready" in out
    assert "2 of 2 stages' runs ready" in out


def _wait_for_report(capfd, title: str, timeout_s: float = 30) -> str:
    """What the progress threads printed, once the one of the lesson titled `title` printed its total line (another
    test's lesson may still print its own); AssertionError with what was printed when that line does not come
    within timeout_s."""
    import time

    total = f"lesson {title!r}: "
    seen, end = "", time.monotonic() + timeout_s
    while time.monotonic() < end:
        seen += capfd.readouterr().out
        if any(line.startswith(total) and "stages' runs ready" in line for line in seen.splitlines()):
            return seen
        time.sleep(0.2)
    raise AssertionError(f"no {total}... stages' runs ready line in {timeout_s:g} s; the progress printed: {seen!r}")


def test_the_stage_request_is_the_one_its_link_opens(tmp_path):
    """The stage's request opened as a link (app.py reads it into the sidebar) is stored under the same key."""
    from pipeline.lessons.lesson import parse_lesson
    from views.request.session import DEFAULTS, request_from_fields, request_key
    from views.server.lesson_runs import stage_request
    from views.server.state import get_model

    stage = parse_lesson(LESSON).stages[0]
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.query_params = stage.query()
    at.run()
    assert not at.exception, at.exception
    fields = {k: at.session_state[f"req_{k}"] for k in DEFAULTS}
    opened = request_from_fields(fields, get_model(fields["model"], fields["weights"]))
    assert request_key(opened) == request_key(stage_request(stage))
    assert opened.options.temperature == 0.8 and opened.options.seed == 11 and opened.options.max_new_tokens == 3


def test_a_lesson_that_cannot_be_used_is_said_and_nothing_runs(tmp_path):
    from views.server.lesson_runs import start_lesson_runs

    path = tmp_path / "bad.toml"
    path.write_text(LESSON.replace('page = "tokens"', 'page = "tokenz"'), encoding="utf-8")
    runs = start_lesson_runs(str(path))
    assert runs.lesson is None and runs.stages == []
    assert runs.problem.startswith(f"{path}, line 5: stages[0].page:")


def test_a_branching_stage_prepares_the_presenters_samples(tmp_path):
    """A Generation stage with its Branch section on is shown on "Many answers at once": the samples that screen
    draws (the room's default where the stage sets no samples, the stage's request) are drawn at start and stored
    where it looks."""
    from pipeline.lessons.lesson import parse_lesson
    from views.request.samples import ROOM_CONTROLS, room_plan, samples_key
    from views.server.lesson_runs import stage_request, start_lesson_runs
    from views.server.state import default_model_key, using_model
    from views.server.waiting import stored_result

    text = """title = "Branching"

[[stages]]
title = "Many answers"
page = "generation"
[stages.request]
q = "Do owls blink?"
max_new_tokens = 3
[stages.controls]
"gen.branch_on" = true
"""
    path = tmp_path / "branching.toml"
    path.write_text(text, encoding="utf-8")
    runs = start_lesson_runs(str(path))
    (stage,) = runs.stages
    assert stage.samples_ticket is not None
    for ticket in stage.tickets():
        ticket.result(timeout=300)
    request = stage_request(parse_lesson(text).stages[0])
    room = room_plan(ROOM_CONTROLS)
    with using_model(default_model_key(), "fp32"):
        assert stage.samples_key == samples_key(request, room.temperatures, room.seed)
        samples = stored_result(stage.samples_key)
    assert samples is not None and [s.temperature for s in samples.samples] == [0.0, 1.0, 1.0, 1.0]
