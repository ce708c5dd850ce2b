"""A lesson's runs, computed when the server starts (`./run.sh app --lesson FILE`): each stage's request is queued
through the room's run queue and kept in its store, as a page's own request is, so the room never waits on the model
for the lesson's content. Progress is printed on the server's terminal and shown on the presenter's screen.

    lesson_runs() -> LessonRuns | None   # once per server (st.cache_resource); None without TPE_LESSON

server.py starts it from its lifespan (at start), app.py after the first page (a server of the pages alone).
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

import streamlit as st

from pipeline.lessons.lesson import Lesson, LessonError, Stage, read_lesson
from pipeline.model.registry import resolve
from pipeline.stages.request import ChatRequest
from views.links.url_state import request_fields
from views.request.samples import room_plan, submit_samples
from views.request.session import DEFAULTS, request_from_fields, request_key
from views.server.scenarios import submit_scenario
from views.server.state import get_model, run_store, using_model
from views.server.waiting import submit_run

LESSON_ENV = "TPE_LESSON"  # the lesson file `./run.sh app --lesson FILE` names


def stage_request(stage: Stage) -> ChatRequest:
    """The request a page shows once the stage's link is opened: the link's fields over the sidebar's defaults,
    read as a link is (views/links/url_state.py's request_fields), made by the sidebar's one builder."""
    read = {key.removeprefix("req_"): value for key, value in request_fields(stage.request).items()}
    fields = {**DEFAULTS, **read}
    with using_model(fields["model"], fields["weights"]):
        return request_from_fields(fields, get_model(fields["model"], fields["weights"]))


@dataclass
class StageRun:
    number: int  # 1-based
    title: str
    ticket: object | None  # a run queue's ticket; None: found in the store already
    key: tuple
    scenario_ticket: object | None = None  # a prompt-caching stage's scenario
    samples_ticket: object | None = None  # a Generation stage with its Branch section on: the presenter's samples
    samples_key: tuple | None = None  # where those samples are kept (views/request/samples.py's samples_key)

    def tickets(self) -> list:
        return [t for t in (self.ticket, self.scenario_ticket, self.samples_ticket) if t is not None]

    def done(self) -> bool:
        return all(t.done() for t in self.tickets())

    def error(self) -> BaseException | None:
        return next((t.exception() for t in self.tickets() if t.done() and t.exception() is not None), None)


@dataclass
class LessonRuns:
    lesson: Lesson | None
    problem: str | None = None  # the file could not be used: why (its line and field)
    stages: list[StageRun] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def ready(self) -> int:
        return sum(s.done() for s in self.stages)

    def finished(self) -> bool:
        return all(s.done() for s in self.stages)

    def progress_line(self) -> str:
        if self.lesson is None:
            return f"lesson: not used: {self.problem}"
        failed = [s for s in self.stages if s.done() and s.error() is not None]
        return (f"lesson {self.lesson.title!r}: {self.ready()} of {len(self.stages)} stages' runs ready "
                f"({time.monotonic() - self.started:.1f} s)" + (f", {len(failed)} failed" if failed else ""))


def _queue_stage(number: int, stage: Stage) -> StageRun:
    """Queue the stage's run (and a prompt-caching stage's scenario, a branching stage's samples) as its page and
    its presenter's screen would, without waiting for them."""
    request = stage_request(stage)
    key = request_key(request)
    ticket = None if run_store().peek(key, disk=True) is not None else submit_run(request)
    run = StageRun(number, stage.title, ticket, key)
    scenario = stage.controls.get("pc.scenario")
    if stage.page == "prompt-caching" and scenario:
        with using_model(resolve(request.model).key, request.weights):  # the page's picked model
            run.scenario_ticket = submit_scenario(scenario, int(stage.controls.get("pc.block_size", "16")))
    if stage.page == "generation" and stage.controls.get("gen.branch_on") == "1":  # "Many answers at once"
        plan = room_plan(stage.controls)  # as the presenter's screen reads the stage's controls
        for note in plan.notes:
            print(f"lesson: stage {number} {stage.title!r}: {note}", flush=True)
        with using_model(resolve(request.model).key, request.weights):
            run.samples_key, run.samples_ticket = submit_samples(request, plan)
    return run


def _report(runs: LessonRuns) -> None:
    """Print the progress on the server's terminal: a line as each stage's runs are ready, then the total."""
    reported = set()
    while True:
        for s in runs.stages:
            if s.number not in reported and s.done():
                reported.add(s.number)
                error = s.error()
                print(f"lesson: stage {s.number}/{len(runs.stages)} {s.title!r}: "
                      + (f"failed ({type(error).__name__}: {str(error)[:200]})" if error else "ready"), flush=True)
        if len(reported) == len(runs.stages):
            print(runs.progress_line(), flush=True)
            return
        time.sleep(0.5)


def start_lesson_runs(path: str) -> LessonRuns:
    """Read the lesson and queue every stage's runs; a thread prints the progress. A lesson that cannot be used is
    said on the terminal and on the presenter's screen; the server runs without it."""
    try:
        lesson = read_lesson(path)
    except LessonError as e:
        runs = LessonRuns(None, str(e))
        print(runs.progress_line(), flush=True)
        return runs
    runs = LessonRuns(lesson)
    print(f"lesson {lesson.title!r}: preparing the runs of its {len(lesson.stages)} stages", flush=True)
    for n, stage in enumerate(lesson.stages, 1):
        try:
            runs.stages.append(_queue_stage(n, stage))
        except Exception as e:  # noqa: BLE001 - said for that stage; the other stages still run
            failed = _failed_ticket(e)
            runs.stages.append(StageRun(n, stage.title, failed, ()))
    threading.Thread(target=_report, args=(runs,), name="lesson-progress", daemon=True).start()
    return runs


def _failed_ticket(error: BaseException):
    from concurrent.futures import Future

    done = Future()
    done.set_exception(error)
    return done


@st.cache_resource(show_spinner=False)
def _lesson_runs(path: str) -> LessonRuns:
    return start_lesson_runs(path)


def lesson_runs() -> LessonRuns | None:
    """The lesson this server was started with (TPE_LESSON) and its runs, queued once per server; None without one."""
    path = os.environ.get(LESSON_ENV, "").strip()
    return _lesson_runs(path) if path else None
