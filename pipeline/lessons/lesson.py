"""A lesson file read and checked: `read_lesson(path) -> Lesson`, or a LessonError that names the file's line and
the field (`first-hour.toml, line 41: stages[3].request.temperature: is 5; must be from 0.0 to 2.0`).

    title = "Your first hour inside a language model"
    minutes = 45

    [[stages]]
    title = "One request, as JSON"
    page = "request"                    # a page of the app, by its address (views/chrome/page_list.py)
    say = "What the presenter tells the room (optional)."
    [stages.request]                    # the request, as the link names it: q, model, temperature, top_k, ...
    q = "Are tomatoes fruit?"
    [stages.controls]                   # the page's own controls, as the link names them (optional)
    "nt.top_k" = 8
    [stages.poll]                       # optional: one of the room's polls
    kind = "next_token"
    question = "What will the model write first?"

A stage's `query()` is the link's query string for its view: the request's names and the controls' side by side.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core.errors import InputError
from pipeline.core.poll_kinds import MAX_QUESTION_CHARS
from pipeline.lessons.fields import (
    REQUEST_CHECKS,
    check_control,
    check_page,
    check_poll_kind,
)
from pipeline.lessons.lines import line_of

MAX_STAGES = 60
MAX_TITLE = 120
MAX_SAY = 2000  # characters the presenter reads for a stage
MAX_FILE_BYTES = 1 << 20
LESSON_KEYS = ("title", "minutes", "summary", "stages")
STAGE_KEYS = ("title", "page", "minutes", "say", "request", "controls", "poll")
POLL_KEYS = ("kind", "question")


class LessonError(InputError):
    """A lesson file that cannot be used: where (file, line) and which field, in the author's words."""

    def __init__(self, path: str, line: int | None, field: str, message: str):
        super().__init__(field, message)
        self.path, self.line = path, line  # line None: the whole file (it cannot be read, or is too big)

    def __str__(self) -> str:
        if self.line is None:
            return f"{self.field}: {self.path} {self.message}"
        return f"{self.path}, line {self.line}: {self.field}: {self.message}"


@dataclass(frozen=True)
class Poll:
    kind: str  # one of pipeline.core.poll_kinds.KINDS
    question: str


@dataclass(frozen=True)
class Stage:
    title: str
    page: str  # a page's address: 'next-token'
    request: dict[str, str] = field(default_factory=dict)  # link name -> the link's text: {'q': '...', 'top_k': '8'}
    controls: dict[str, str] = field(default_factory=dict)  # {'nt.top_k': '8'}
    poll: Poll | None = None
    minutes: int | None = None
    say: str = ""

    def query(self) -> dict[str, str]:
        """The link's query parameters for this stage's view (the page is the link's path)."""
        return {**self.request, **self.controls}


@dataclass(frozen=True)
class Lesson:
    title: str
    stages: tuple[Stage, ...]
    minutes: int | None = None
    summary: str = ""
    path: str = ""


class _Reader:
    """Checks one file's parsed data, each refusal with its line (found in `text`)."""

    def __init__(self, path: str, text: str):
        self.path, self.text = path, text

    def fail(self, field: str, message: str, stage: int | None = None, table: str | None = None,
             key: str | None = None):
        raise LessonError(self.path, line_of(self.text, stage, table, key), field, message)

    def keys(self, data: dict, allowed: tuple, where: str, stage: int | None = None, table: str | None = None):
        for key in data:
            if key not in allowed:
                self.fail(f"{where}{key}", f"is not a field here; the fields are {', '.join(allowed)}",
                          stage, table, key)

    def text_field(self, data: dict, key: str, where: str, limit: int, stage: int | None, table: str | None = None,
                   required: bool = False) -> str:
        if key not in data:
            if required:
                self.fail(f"{where}{key}", "is missing", stage, table)
            return ""
        value = data[key]
        if not isinstance(value, str) or not value.strip():
            self.fail(f"{where}{key}", "must be text in quotes, not empty", stage, table, key)
        if len(value) > limit:
            self.fail(f"{where}{key}", f"is {len(value):,} characters; at most {limit:,}", stage, table, key)
        return value

    def minutes(self, data: dict, where: str, stage: int | None) -> int | None:
        value = data.get("minutes")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 600):
            self.fail(f"{where}minutes", "must be a whole number of minutes from 1 to 600", stage, None, "minutes")
        return value

    def table(self, data: dict, key: str, where: str, stage: int) -> dict:
        value = data.get(key, {})
        if not isinstance(value, dict):
            self.fail(f"{where}{key}", "must be a table ([stages." + key + "] or {...})", stage, None, key)
        return value

    def stage(self, n: int, data) -> Stage:
        where = f"stages[{n}]."
        if not isinstance(data, dict):
            self.fail(f"stages[{n}]", "must be a table ([[stages]])", n)
        self.keys(data, STAGE_KEYS, where, n)
        title = self.text_field(data, "title", where, MAX_TITLE, n, required=True)
        if "page" not in data:
            self.fail(f"{where}page", "is missing", n)
        try:
            page = check_page(data["page"])
        except ValueError as e:
            self.fail(f"{where}page", str(e), n, None, "page")
        request, controls = {}, {}
        for key, value in self.table(data, "request", where, n).items():
            check = REQUEST_CHECKS.get(key)
            if check is None:
                self.fail(f"{where}request.{key}", "is not a request field; the fields are "
                          + ", ".join(REQUEST_CHECKS), n, "request", key)
            try:
                request[key] = check(value)
            except ValueError as e:
                self.fail(f"{where}request.{key}", getattr(e, "message", str(e)), n, "request", key)
        for key, value in self.table(data, "controls", where, n).items():
            try:
                controls[key] = check_control(key, value)
            except ValueError as e:
                self.fail(f"{where}controls.{key}", str(e), n, "controls", key)
        return Stage(title=title, page=page, request=request, controls=controls, poll=self.poll(data, where, n),
                     minutes=self.minutes(data, where, n), say=self.text_field(data, "say", where, MAX_SAY, n))

    def poll(self, data: dict, where: str, n: int) -> Poll | None:
        if "poll" not in data:
            return None
        poll = self.table(data, "poll", where, n)
        self.keys(poll, POLL_KEYS, f"{where}poll.", n, "poll")
        if "kind" not in poll:
            self.fail(f"{where}poll.kind", "is missing", n, "poll")
        try:
            kind = check_poll_kind(poll["kind"])
        except ValueError as e:
            self.fail(f"{where}poll.kind", str(e), n, "poll", "kind")
        question = self.text_field(poll, "question", f"{where}poll.", MAX_QUESTION_CHARS, n, "poll", required=True)
        return Poll(kind, question)

    def lesson(self, data: dict) -> Lesson:
        self.keys(data, LESSON_KEYS, "")
        title = self.text_field(data, "title", "", MAX_TITLE, None, required=True)
        stages = data.get("stages")
        if not isinstance(stages, list) or not stages:
            self.fail("stages", "a lesson needs at least one [[stages]]", None, None, "stages")
        if len(stages) > MAX_STAGES:
            self.fail("stages", f"has {len(stages)} stages; at most {MAX_STAGES}", MAX_STAGES)
        return Lesson(title=title, stages=tuple(self.stage(n, s) for n, s in enumerate(stages)),
                      minutes=self.minutes(data, "", None), summary=self.text_field(data, "summary", "", MAX_SAY, None),
                      path=self.path)


def parse_lesson(text: str, path: str = "lesson.toml") -> Lesson:
    """A lesson from its TOML text; LessonError (with line and field) when it cannot be used."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:  # its message ends '(at line 4, column 9)'
        line = getattr(e, "lineno", None) or _line_in_message(str(e))
        raise LessonError(path, line, "toml", str(e).split(" (at line")[0]) from None
    return _Reader(path, text).lesson(data)


def _line_in_message(message: str) -> int:
    found = re.search(r"at line (\d+)", message)
    return int(found[1]) if found else 1


def read_lesson(path: str | Path) -> Lesson:
    """The lesson in this file (TOML, UTF-8, named *.toml); LessonError when it cannot be read or used (a .json or
    any other file is refused by its name, before it is read)."""
    path = Path(path)
    if path.suffix.lower() != ".toml":
        raise LessonError(str(path), None, "file", "is not a .toml file: a lesson is written in TOML "
                          "(docs/lessons.md), not JSON or any other format")
    try:
        raw = path.read_bytes()
    except (OSError, ValueError) as e:  # ValueError: a path with a NUL in it
        raise LessonError(str(path), None, "file", f"cannot be read ({getattr(e, 'strerror', None) or e})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise LessonError(str(path), None, "file", f"is {len(raw):,} bytes; a lesson is at most {MAX_FILE_BYTES:,}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise LessonError(str(path), None, "file", "is not UTF-8 text") from None
    return parse_lesson(text, str(path))
