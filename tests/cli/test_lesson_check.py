"""`python -m pipeline lesson check FILE`: every shipped lesson passes and lists its stages; a lesson with a bad
field exits 2 with one line naming its line and field (fast tier, no model)."""
from __future__ import annotations

from pathlib import Path

import pytest
from kit.cli import run_cli
from kit.paths import ROOT

from pipeline.core.poll_kinds import KINDS
from pipeline.lessons.lesson import read_lesson

SHIPPED = sorted((Path(ROOT) / "lessons").glob("*.toml"))


def test_two_lessons_are_shipped():
    assert {p.name for p in SHIPPED} >= {"first-hour.toml", "engineers-caching.toml"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_lesson_passes_the_check(tmp_path, path):
    run = run_cli(tmp_path, "lesson", "check", str(path))
    assert run.code == 0, run.err
    lesson = read_lesson(path)
    for n, stage in enumerate(lesson.stages, 1):
        assert f"{n:3d}. {stage.title}  [/{stage.page}]" in run.out


def test_the_first_hour_has_every_poll_and_fits_its_time():
    lesson = read_lesson(Path(ROOT) / "lessons" / "first-hour.toml")
    assert {s.poll.kind for s in lesson.stages if s.poll} == set(KINDS)
    assert 40 <= sum(s.minutes for s in lesson.stages) <= 50


def test_a_bad_field_exits_2_naming_its_line(tmp_path):
    text = (Path(ROOT) / "lessons" / "first-hour.toml").read_text(encoding="utf-8")
    bad_line = text.splitlines().index("temperature = 1.5") + 1
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("temperature = 1.5", "temperature = 9", 1), encoding="utf-8")
    run = run_cli(tmp_path, "lesson", "check", str(bad))
    assert run.code == 2 and run.out == ""
    # the terminal shortens a long path with an ellipsis (pipeline/cli/terminal.py): the file's name stays whole
    assert run.err.startswith("error: ") and "bad.toml" in run.err
    assert run.err.endswith(f", line {bad_line}: stages[5].request.temperature: is 9; must be from 0.0 to 2.0\n")


def test_a_missing_file_exits_2(tmp_path):
    run = run_cli(tmp_path, "lesson", "check", str(tmp_path / "none.toml"))
    assert run.code == 2 and run.err.startswith("error: file: ") and "none.toml cannot be read" in run.err
