"""`tpe COMMAND ...` (the console script, pyproject.toml): the project's one command line, every command
pipeline/ can run (pipeline.cli.COMMANDS) and the HTML report (ui/report_command.py), registered the same way.

This entry point sits in ui/ because the report's HTML is made here and pipeline/ never imports ui/: ui/ adds its
command to pipeline's list, never the other way round. `python -m pipeline` runs pipeline's commands alone;
`python -m ui` is this command line under another name.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence

from pipeline import cli
from ui import report_command

COMMANDS = (*cli.COMMANDS, report_command)
PROG = "tpe"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    return cli.build_parser(COMMANDS, prog=prog, description=__doc__)


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    return cli.run_command(build_parser(prog), COMMANDS, argv)

