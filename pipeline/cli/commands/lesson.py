"""`python -m pipeline lesson check FILE`: a lesson file read and checked (pipeline.lessons), its stages printed in
order (page, request, controls, poll); a file that cannot be used exits 2 with its line and field."""
from __future__ import annotations

import argparse
import sys

from pipeline.lessons.lesson import LessonError, read_lesson

NAME = "lesson"
HELP = "check a lesson file and print its stages"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["check"], help="check: read the file, say what is wrong or list its stages")
    p.add_argument("file", help="a lesson, e.g. lessons/first-hour.toml")


def run(args) -> int:
    from pipeline.cli.parser import error_line

    try:
        lesson = read_lesson(args.file)
    except LessonError as e:
        print(f"error: {error_line(str(e))}", file=sys.stderr)
        return 2
    minutes = sum(s.minutes or 0 for s in lesson.stages)
    print(f"{lesson.title}: {len(lesson.stages)} stages"
          + (f", {lesson.minutes} minutes planned" if lesson.minutes else "")
          + (f" ({minutes} minutes in its stages)" if minutes else ""))
    for n, stage in enumerate(lesson.stages, 1):
        print(f"{n:3d}. {stage.title}  [/{stage.page}]" + (f"  {stage.minutes} min" if stage.minutes else ""))
        if stage.request:
            print("     request: " + ", ".join(f"{k}={v!r}" for k, v in stage.request.items()))
        if stage.controls:
            print("     controls: " + ", ".join(f"{k}={v}" for k, v in stage.controls.items()))
        if stage.poll:
            print(f"     poll ({stage.poll.kind}): {stage.poll.question}")
    return 0
